#!/usr/bin/env bash
# Weft beside LangGraph on this machine: builds weft-bench (release), makes
# a venv with LangGraph if there is none, then runs both sides' workloads
# alternately, round after round, and prints one table with ratios and
# instruction counts (bench/compare.py; --help lists its options).
#
#   bench/compare.sh                          # 3 rounds, every workload
#   bench/compare.sh --rounds 5 --only w1,w4
#   bench/compare.sh --update README.md --update docs/benchmarks.md
#
# WEFT_BENCH_VENV names the venv (default target/bench/venv). The
# instruction counts need valgrind (Debian's valgrind); --no-callgrind
# skips them.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${WEFT_BENCH_VENV:-target/bench/venv}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import langgraph.checkpoint.sqlite, langchain_classic, rank_bm25' 2>/dev/null; then
  echo "making $venv with LangGraph and LangChain's retrievers (bench/requirements.txt)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r bench/requirements.txt
fi
cargo build --release -q -p weft-tests --bin weft-bench
exec python3 bench/compare.py --bench target/release/weft-bench --python "$venv/bin/python" \
  --raw "target/bench/compare-$(date +%Y%m%dT%H%M%S).jsonl" "$@"
