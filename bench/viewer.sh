#!/usr/bin/env bash
# How responsive the run viewer is on big runs (issue 24): a coordinator
# and two test-workers from target/debug, a 10,000-item map and a run of
# about 5,000 events, then bench/viewer.py in Debian's chromium
# (tests/browser/setup.sh installs it and Playwright). Prints the figures.
#
#   bench/viewer.sh            # builds the binaries first (debug profile)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --bins
tests/browser/setup.sh >/dev/null
bin=target/debug
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
"$bin/coordinator" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$dir/data" \
  >"$dir/coordinator.out" 2>"$dir/coordinator.log" &
until grep -q "^metrics on" "$dir/coordinator.out" 2>/dev/null; do sleep 0.1; done
url="http://$(sed -n 's/^coordinator listening on //p' "$dir/coordinator.out")"
base=$(sed -n 's|^metrics on \(.*\)/metrics$|\1|p' "$dir/coordinator.out")
for name in a b; do
  "$bin/test-worker" --coordinator "$url" --name "$name" --slots 16 --work-dir "$dir/$name" 2>"$dir/$name.log" &
done
until [ "$(grep -c 'joined the coordinator' "$dir"/a.log "$dir"/b.log | awk -F: '{s+=$2} END {print s}')" -ge 2 ]; do sleep 0.1; done

cat >"$dir/map.yaml" <<'YAML'
name: big-map
settings: { max_loop_iterations: 3 }
state:
  items: { type: array, default: [] }
  delay_ms: { type: integer, default: 20 }
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: double
    output_key: doubled_item
    collect_into: results
    max_concurrency: 32
  double: { kind: task, handler: double, state_updates: { doubled_item: "{{ output }}" } }
YAML
cat >"$dir/count.yaml" <<'YAML'
name: counting
settings: { max_steps: 1100 }
state:
  counter: { type: integer, default: 0 }
nodes:
  inc: { kind: task, handler: increment, start: true }
  done: { kind: end }
edges:
  - { from: inc, to: inc, loop: true, when: "state.counter < 1000" }
  - { from: inc, to: done, when: "state.counter >= 1000" }
YAML
items=$(python3 -c 'import json; print(json.dumps({"items": list(range(10000))}))')
weft() { "$bin/weft" --coordinator "$url" "$@"; }
count=$(weft run "$dir/count.yaml" --detach --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
weft watch "$count" >/dev/null 2>&1
map=$(weft run "$dir/map.yaml" --input "$items" --detach --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
target/browser-venv/bin/python bench/viewer.py --base "$base" --map "$map" --events "$count"
