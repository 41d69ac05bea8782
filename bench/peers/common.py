"""Shared helpers for the peer-engine baseline scripts.

Every workload script prints exactly ONE JSON line on stdout (last line), with:
  engine, workload, variant, params, setup_s (import/init/compile inside the process),
  warmup_s (first, in-process-cold iteration), times_s (timed iterations after warmup),
  ok (result verified), plus workload-specific extras.
"""
import argparse
import json
import os
import sys
import time

ITERS_DEFAULT = int(os.environ.get("BENCH_ITERS", "3"))

# Workload constants (the workloads of docs/benchmarks.md; weft-bench uses the same).
W1_NODES = 200
W3_BRANCHES = 8
W3_SLEEP_S = 0.050
W3_ROUNDS = 10
W4_NODES = 20
W4_BLOB_BYTES = 10_000_000  # 10 MB (decimal) ASCII string -> "x" * 10_000_000


def parser(desc):
    p = argparse.ArgumentParser(description=desc)
    p.add_argument("--iters", type=int, default=ITERS_DEFAULT, help="timed iterations after 1 warmup")
    p.add_argument("--variant", default="default")
    p.add_argument("--n", type=int, default=0)
    p.add_argument("--max-concurrency", type=int, default=0)
    return p


def now():
    return time.perf_counter()


def t0_ns():
    v = os.environ.get("BENCH_T0_NS")
    return int(v) if v else None


def run_iters(fn, iters):
    """1 warmup + `iters` timed calls of fn(); fn returns (elapsed_s, ok, extra_dict)."""
    w, ok, extra = fn()
    times = []
    for _ in range(iters):
        t, ok2, extra = fn()
        ok = ok and ok2
        times.append(t)
    return w, times, ok, extra


def emit(engine, workload, variant, params, **kw):
    rec = {"engine": engine, "workload": workload, "variant": variant, "params": params}
    rec.update(kw)
    sys.stdout.flush()
    print(json.dumps(rec), flush=True)
