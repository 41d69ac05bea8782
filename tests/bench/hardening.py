#!/usr/bin/env python3
"""Hostile-input figures (issue #8), against real release binaries.

    python3 tests/bench/hardening.py [BIN_DIR]   # default: target/release

Starts a coordinator and one worker from BIN_DIR, then measures, each
against a fresh coordinator:

  names    a JSON graph whose node id and `next` are 8,000-character strings:
           seconds and peak RSS of `weft validate` (the graph library the
           coordinator runs on every submission)
  cel      `state.l.all(x, state.l.all(y, state.l.all(z, true)))` over a
           400-item list: seconds until the run ends
  merge    one script output with 10,000 fields: seconds for the run
  runs     1,000 trivial runs: coordinator RSS growth (MB) once they ended
  prompt   `weft status` on a waiting run whose state holds a 10 MB field:
           median seconds per call

Each figure is printed as `name value unit`. A figure that does not finish
within its patience is printed as `>PATIENCE` (the process is killed).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join("target", "release")
PATIENCE = 60


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Cluster:
    def __init__(self, work):
        self.work = work
        self.coordinator = subprocess.Popen(
            [f"{BIN}/coordinator", "--listen", "127.0.0.1:0", "--metrics-listen",
             "127.0.0.1:0", "--data-dir", os.path.join(work, "data")],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.coordinator.stdout.readline()
        self.url = "http://" + line.strip().removeprefix("coordinator listening on ")
        self.worker = subprocess.Popen(
            [f"{BIN}/worker", "--coordinator", self.url, "--slots", "2",
             "--work-dir", os.path.join(work, "worker")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def weft(self, *args, timeout=PATIENCE):
        return subprocess.run([f"{BIN}/weft", "--coordinator", self.url, *args],
                              capture_output=True, text=True, timeout=timeout)

    def stop(self):
        for process in (self.worker, self.coordinator):
            process.kill()
            process.wait()


def write(work, name, text):
    path = os.path.join(work, name)
    with open(path, "w") as out:
        out.write(text)
    return path


def timed_run(cluster, graph, *extra):
    start = time.monotonic()
    try:
        cluster.weft("run", graph, "--json", *extra)
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - start


def ready(cluster):
    """Waits until the worker has joined (a trivial run completes)."""
    graph = write(cluster.work, "ready.yaml",
                  "nodes:\n  a: { kind: script, run: [sh, -c, 'echo {}'], start: true }\n")
    for _ in range(100):
        if cluster.weft("run", graph, "--json").returncode == 0:
            return graph
        time.sleep(0.1)
    raise SystemExit("the worker never joined")


def names(cluster):
    import resource
    long_id, target = "n" * 8000, "m" * 8000
    graph = write(cluster.work, "names.json",
                  json.dumps({"nodes": {long_id: {"kind": "end", "start": True, "next": target}}}))
    start = time.monotonic()
    subprocess.run([f"{BIN}/weft", "validate", graph], capture_output=True, timeout=PATIENCE)
    seconds = time.monotonic() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return [("names_validate_seconds", seconds, "s"), ("names_validate_peak_rss", peak, "MB")]


def cel(cluster):
    graph = write(cluster.work, "cel.yaml", """
nodes:
  a: { kind: script, run: [sh, -c, 'echo {}'], start: true }
  b: { kind: script, run: [sh, -c, 'echo {}'] }
edges:
  - { from: a, to: b, when: "state.l.all(x, state.l.all(y, state.l.all(z, true)))" }
""")
    return [("cel_seconds", timed_run(cluster, graph, "--input", json.dumps({"l": list(range(400))})), "s")]


def merge(cluster):
    graph = write(cluster.work, "merge.yaml", """
nodes:
  wide:
    kind: script
    start: true
    run: [python3, -c, 'import json; print(json.dumps({f"f{i}": i for i in range(10000)}))']
""")
    return [("merge_10k_fields_seconds", timed_run(cluster, graph), "s")]


def runs(cluster):
    graph = ready(cluster)
    before = rss_mb(cluster.coordinator.pid)
    for _ in range(1000):
        cluster.weft("run", graph, "--json")
    return [("runs_1000_rss_growth", rss_mb(cluster.coordinator.pid) - before, "MB")]


def prompt(cluster):
    graph = write(cluster.work, "prompt.yaml", """
nodes:
  ok: { kind: approval, start: true, prompt: "Publish {{ title }}?" }
""")
    big = write(cluster.work, "big.json", json.dumps({"title": "t", "blob": "x" * (10 << 20)}))
    detached = cluster.weft("run", graph, "--input", "@" + big, "--detach", "--json")
    run_id = json.loads(detached.stdout)["run_id"]
    times = []
    for _ in range(7):
        start = time.monotonic()
        cluster.weft("status", run_id, "--json")
        times.append(time.monotonic() - start)
    return [("prompt_status_median_seconds", statistics.median(times), "s")]


def main():
    for measure in (names, cel, merge, runs, prompt):
        with tempfile.TemporaryDirectory() as work:
            cluster = Cluster(work)
            try:
                if measure not in (runs,):
                    ready(cluster)
                for name, value, unit in measure(cluster):
                    shown = f">{PATIENCE}" if value is None else f"{value:.3f}"
                    print(f"{name} {shown} {unit}", flush=True)
            finally:
                cluster.stop()


if __name__ == "__main__":
    main()
