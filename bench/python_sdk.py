"""W1 and W2 driven from the Python client and served by the Python worker,
beside LangGraph's in-process figures (issue 25).

A coordinator process (the release build's, `--coordinator`), a
`weft.Worker` process hosting the handlers (`bench/python_worker.py`),
and a `weft.Client` in this process submitting:

- W1: a chain of 200 `task` nodes over `{"counter"}`, each adding one;
  figure: per node (median wall time of a run / 200);
- W2: a map over N items (1,000 and 10,000), each `task` returning
  item×2, collected in order; figure: items per second.

With `--rust-worker PATH` (the release `test-worker`), the same graphs
also run served by a Rust worker (its handlers `increment` and `double`)
through the same client, against a coordinator of their own: the Python
worker's cost beside the Rust worker's, in the same window. With
`--langgraph PYTHON` (a venv with LangGraph, `bench/requirements.txt`),
LangGraph's W1 and W2 scripts (`bench/peers`) run in the same window,
alternating round by round. Prints one table with medians.

    python bench/python_sdk.py --coordinator target/release/coordinator \\
        --rust-worker target/release/test-worker --langgraph target/bench/venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import weft

HERE = Path(__file__).resolve().parent
W1_NODES = 200


def start_coordinator(binary: str, directory: Path) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [binary, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", str(directory)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = process.stdout.readline().decode()
    if not line.startswith("coordinator listening on "):
        raise SystemExit(f"the coordinator did not start: {line!r}")
    return process, "http://" + line.split()[-1]


def start_worker(url: str, slots: int) -> subprocess.Popen:
    """The Python worker, a process of its own as in a deployment."""
    process = subprocess.Popen([sys.executable, str(HERE / "python_worker.py"), url, str(slots)],
                               stdout=subprocess.PIPE)
    line = process.stdout.readline().decode()
    if "joined the coordinator" not in line:
        raise SystemExit(f"the Python worker did not join: {line!r}")
    return process


def start_rust_worker(binary: str, url: str, slots: int, directory: Path) -> subprocess.Popen:
    """The Rust test worker, hosting the same work as `increment` and
    `double`."""
    process = subprocess.Popen([binary, "--coordinator", url, "--name", "rust-bench", "--slots", str(slots),
                                "--only", "increment,double", "--work-dir", str(directory)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for line in process.stderr:
        if b"joined the coordinator" in line:
            # Its `double` logs each item: drained so it never blocks.
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process
    raise SystemExit("the Rust worker did not join")


def w1_graph(handler: str = "inc") -> dict:
    nodes = {f"n{i}": {"kind": "task", "handler": handler} for i in range(W1_NODES)}
    nodes["n0"]["start"] = True
    for i in range(W1_NODES - 1):
        nodes[f"n{i}"]["next"] = f"n{i + 1}"
    nodes[f"n{W1_NODES - 1}"]["end"] = True
    return {"name": "w1", "settings": {"max_steps": W1_NODES + 10},
            "state": {"counter": {"type": "integer", "default": 0}}, "nodes": nodes}


def w2_graph(concurrency: int, handler: str = "double") -> dict:
    return {
        "name": "w2",
        "settings": {"max_concurrency": concurrency},
        "state": {"items": {"type": "array"}, "results": {"type": "array", "default": []}},
        "nodes": {
            "fan": {"kind": "map", "start": True, "end": True, "over": "{{ items }}", "as": "item",
                    "branch": "double", "output_key": "doubled", "collect_into": "results"},
            "double": {"kind": "task", "handler": handler},
        },
    }


def timed(client: weft.Client, graph: dict, payload: dict) -> tuple[float, weft.RunInfo]:
    start = time.perf_counter()
    result = client.submit(graph, input=payload).wait(timeout=600)
    return time.perf_counter() - start, result


def weft_w1(client: weft.Client, handler: str = "inc") -> float:
    elapsed, result = timed(client, w1_graph(handler), {"counter": 0})
    assert result.state == {"counter": W1_NODES}, result
    return elapsed / W1_NODES * 1e6


def weft_w2(client: weft.Client, n: int, concurrency: int) -> float:
    items = list(range(n))
    elapsed, result = timed(client, w2_graph(concurrency), {"items": items})
    assert result.state["results"] == [i * 2 for i in items], result.error
    return n / elapsed


def langgraph(python: str, script: str, *args: str) -> dict:
    # An absolute path that keeps the venv's name (resolving would follow
    # its link to the base interpreter).
    python = os.path.abspath(python)
    out = subprocess.run([python, str(HERE / "peers" / script), "--iters", "1", *args],
                         capture_output=True, text=True, check=True, cwd=HERE / "peers")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", default="target/release/coordinator")
    parser.add_argument("--langgraph", help="a python with LangGraph installed")
    parser.add_argument("--rust-worker", help="the release test-worker, for the same graphs on a Rust worker")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--slots", type=int, default=32)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="weft-py-bench-"))
    coordinator, url = start_coordinator(args.coordinator, directory)
    rust = None
    try:
        worker = start_worker(url, args.slots)
        client = weft.Client(url)
        weft_w1(client)  # warm-up: the worker joined, the graph parsed once
        if args.rust_worker:
            (directory / "rust").mkdir()
            rust_coordinator, rust_url = start_coordinator(args.coordinator, directory / "rust")
            rust = (rust_coordinator, start_rust_worker(args.rust_worker, rust_url, args.slots, directory / "rw"))
            rust_client = weft.Client(rust_url)
            weft_w1(rust_client, "increment")
        figures: dict[str, list[float]] = {}

        def add(key: str, value: float) -> None:
            figures.setdefault(key, []).append(value)

        for _ in range(args.rounds):
            add("weft W1 µs/node", weft_w1(client))
            for n in (1_000, 10_000):
                add(f"weft W2 N={n} items/s", weft_w2(client, n, args.slots))
            if rust is not None:
                add("weft, Rust worker: W1 µs/node", weft_w1(rust_client, "increment"))
                for n in (1_000, 10_000):
                    add(f"weft, Rust worker: W2 N={n} items/s", weft_w2(rust_client, n, args.slots))
            if args.langgraph:
                w1 = langgraph(args.langgraph, "langgraph_w1_chain.py")
                add("langgraph W1 µs/node", statistics.median(w1["times_s"]) / W1_NODES * 1e6)
                for n in (1_000, 10_000):
                    w2 = langgraph(args.langgraph, "langgraph_w2_map.py", "--n", str(n))
                    add(f"langgraph W2 N={n} items/s", n / statistics.median(w2["times_s"]))
        worker.terminate()
        worker.wait()
    finally:
        processes = [coordinator] + (list(reversed(rust)) if rust else [])
        for process in processes:
            process.terminate()
            process.wait()
    print(f"| figure | median of {args.rounds} | rounds |")
    print("|---|---|---|")
    for key, values in figures.items():
        shown = ", ".join(f"{v:,.0f}" for v in values)
        print(f"| {key} | {statistics.median(values):,.0f} | {shown} |")


if __name__ == "__main__":
    sys.exit(main())
