#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 60) each, from seed corpora
# made of the repository's examples and tests, on the machine's stable
# toolchain (RUSTC_BOOTSTRAP lets cargo-fuzz pass its -Z flags; AddressSanitizer
# is on). Crashes land in fuzz/artifacts/TARGET/; the exit status is
# non-zero if any target crashed.
#
#   fuzz/run.sh [SECONDS] [TARGET…]
#
# FUZZ_SANITIZER=none builds the targets without AddressSanitizer: half
# the build time (7 minutes instead of 15 on a 2-core machine, cold), and
# Weft's own code has no `unsafe` for it to watch. `.ci/run`'s short
# regression net uses it; a campaign keeps the default, `address`.
#
# FUZZ_PROFILE=dev builds the targets unoptimized, with debug assertions and
# overflow checks: a shorter build than the default optimized one, and
# slower runs, which a regression net of seconds per target can spare;
# `.ci/run` uses it too.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(graph_load expressions script_stdout worker_messages coordinator_requests run_input)
export RUSTC_BOOTSTRAP=1

# Seeds: every example graph, a few expressions and script outputs.
mkdir -p corpus/graph_load corpus/expressions corpus/script_stdout corpus/worker_messages corpus/coordinator_requests corpus/run_input
cp ../examples/*.yaml corpus/graph_load/ 2>/dev/null || true
printf '{{ topic }} and {{ drafts + 1 }}\0{"topic": "weft", "drafts": 2}' > corpus/expressions/template
printf 'state.score >= 0.8 && size(state.items) < 3\0{"score": 0.9, "items": [1]}' > corpus/expressions/cel
printf '{{ items | map(attribute="x") | join(",") }}\0{"items": [{"x": 1}]}' > corpus/expressions/filters
printf 'size((state.big + state.big) + (state.big + state.big)) > 0\0{}' > corpus/expressions/cel_sum
printf '{{ big ~ big ~ big }}\0{}' > corpus/expressions/template_sum
printf '{"n": 1, "_next": "b"}\n' > corpus/script_stdout/object
printf 'debug line\n{"n": 1}\n' > corpus/script_stdout/noise
printf '' > corpus/script_stdout/empty
printf ' {"doc": "a \\"quoted\\" \\u00e9\\ud83d\\ude00 line\\n", "n": 1, "l": [1.5e3, {"k": null}], "t": true}' > corpus/run_input/object
# A submission of each example, protobuf-encoded (SubmitRequest { bundle:
# GraphBundle { graph_path, files: [BundleFile { path, content, mode }] } }).
python3 - ../examples corpus/coordinator_requests <<'PY'
import os, sys
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out
def field(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload
examples, corpus = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(examples)):
    if not name.endswith(".yaml"):
        continue
    content = open(os.path.join(examples, name), "rb").read()
    file = field(1, name.encode()) + field(2, content) + varint(3 << 3) + varint(0o644)
    bundle = field(1, name.encode()) + field(2, file)
    open(os.path.join(corpus, name + ".pb"), "wb").write(field(1, bundle))
PY

crashed=0
log="$(mktemp)"
for target in "${targets[@]}"; do
  echo "==> $target for ${seconds}s"
  # libFuzzer exits non-zero on a crash, a timeout or an out-of-memory (a
  # single allocation over 512 MB counts: the expressions' budgets are 64 MiB);
  # cargo fuzz does when the target does not build.
  if ! cargo fuzz run $( [ "${FUZZ_PROFILE:-}" = dev ] && echo --dev ) \
      --sanitizer "${FUZZ_SANITIZER:-address}" "$target" "corpus/$target" -- \
      -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=4096 -malloc_limit_mb=512 >"$log" 2>&1; then
    tail -60 "$log"
    echo "==> $target failed: see above and fuzz/artifacts/$target/"
    crashed=1
    continue
  fi
  grep -E '^(#[0-9]+.*DONE|Done)' "$log" || true
done
rm -f "$log"
exit "$crashed"
