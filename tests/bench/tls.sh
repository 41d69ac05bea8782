#!/usr/bin/env bash
# W1 and W2 with TLS and a token beside plaintext (issue 21): a release
# coordinator on loopback and two `weft-bench --serve` workers, over TCP,
# first in plaintext without identities, then with TLS (deploy/secrets.sh's
# certificate) and tokens (an operator's for the workloads, a worker's for
# the workers), ROUNDS times, alternating. Prints weft-bench's table for
# each; docs/benchmarks.md gives the medians.
#
#   cargo build --release -p weft-coordinator --bin coordinator -p weft-tests --bin weft-bench
#   tests/bench/tls.sh [ROUNDS] [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-3}"
iterations="${2:-5}"
bin=target/release
work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

deploy/secrets.sh "$work/secrets" >/dev/null 2>&1
token() { sed -n "s/^$1=//p" "$work/secrets/tokens.env"; }
cat > "$work/secured.toml" <<TOML
secrets_file = "secrets/tokens.env"
[tls]
cert = "secrets/server.pem"
key = "secrets/server.key"
[[tokens]]
name = "operator"
secret = "\${WEFT_OPERATOR_TOKEN}"
role = "operator"
[[tokens]]
name = "worker"
secret = "\${WEFT_WORKER_TOKEN}"
role = "worker"
TOML
: > "$work/plain.toml"

# One round: a coordinator with CONFIG on a fresh port and data directory,
# two workers, the workloads; then all of it stopped.
round() {
  local mode="$1" scheme="http" ca=() worker_token=() client_token=()
  if [ "$mode" = tls ]; then
    scheme=https
    ca=(--ca "$work/secrets/ca.pem")
    worker_token=(--token "$(token WEFT_WORKER_TOKEN)")
    client_token=(--token "$(token WEFT_OPERATOR_TOKEN)")
  fi
  local data="$work/data-$mode-$RANDOM"
  local log="$work/coordinator-$mode.log"
  "$bin/coordinator" --config "$work/$( [ "$mode" = tls ] && echo secured || echo plain ).toml" \
    --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$data" > "$log" 2>&1 &
  local coordinator=$!
  pids+=("$coordinator")
  local address=""
  for _ in $(seq 100); do
    address="$(sed -n 's/^coordinator listening on //p' "$log")"
    [ -n "$address" ] && break
    sleep 0.1
  done
  [ -n "$address" ] || { cat "$log"; exit 1; }
  local url="$scheme://$address"
  for n in 1 2; do
    WEFT_TOKEN= "$bin/weft-bench" --serve "$url" --slots 32 "${ca[@]}" "${worker_token[@]}" \
      > "$work/worker-$mode-$n.log" 2>&1 &
    pids+=("$!")
  done
  echo "== $mode ($url)"
  WEFT_TOKEN= "$bin/weft-bench" --coordinator "$url" --only w1,w2 --iterations "$iterations" \
    "${ca[@]}" "${client_token[@]}" | grep '^|'
  kill "${pids[@]:${#pids[@]}-3}" 2>/dev/null || true
  wait "${pids[@]:${#pids[@]}-3}" 2>/dev/null || true
}

for r in $(seq "$rounds"); do
  echo "### round $r"
  round plain
  round tls
done
