"""Runs weft-bench and LangGraph's scripts of the same workloads alternately,
round after round on this machine, and prints one table with ratios.

`bench/compare.sh` builds weft-bench, makes the LangGraph venv and calls this;
`bench/compare.sh --help` lists the options. Each round runs every workload
once on each side, so a machine that gets busier halfway slows both; the
table gives the median of the rounds' figures with their range, and the
ratio of the medians. Instruction counts under callgrind (W1, W4) are printed
beside the times: they do not move with the machine's load.

Every raw JSON line that either side printed is kept in a JSONL file
(`--raw`), and `--update FILE` rewrites the part of FILE between
`<!-- bench:compare:begin -->` and `<!-- bench:compare:end -->` with the
table.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BEGIN, END = "<!-- bench:compare:begin -->", "<!-- bench:compare:end -->"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", required=True, help="the weft-bench binary (a release build)")
    p.add_argument("--python", required=True, help="the Python that has LangGraph")
    p.add_argument("--peers", default=str(HERE / "peers"), help="LangGraph's workload scripts")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each running both sides")
    p.add_argument("--only", default="w1,w2,w4,w5,w6,w7,w8,w9,w10,w11,soak",
                   help="workloads to compare (w1,w2,w4,w5,w6,w7,w8,w9,w10,w11; soak: W6 for 20,000 runs; "
                        "w9 against LangChain's EnsembleRetriever; w10 and w11 have no peer: a cluster-wide "
                        "rate limit, and model output streamed through a cluster to 100 watchers, "
                        "which none of them has)")
    p.add_argument("--w9-corpus", default=str(HERE.parent / "target" / "bench" / "w9"),
                   help="where W9's labelled corpus is written (peers/w9_corpus.py)")
    p.add_argument("--iterations", type=int, default=5, help="timed iterations per workload")
    p.add_argument("--no-callgrind", action="store_true", help="skip the instruction counts")
    p.add_argument("--raw", help="where to keep every raw JSON line (JSONL)")
    p.add_argument("--update", action="append", default=[],
                   help="a file whose marked section gets the table (repeatable)")
    return p.parse_args()


def json_lines(text):
    """The JSON objects among a process's output lines."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def run(cmd, cwd=None, env=None, label=None):
    """Runs one benchmark process and returns its JSON lines; a failure
    stops the comparison with the process's own words."""
    print(f"  {label or ' '.join(map(str, cmd))}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json_lines(done.stdout)


class Figures:
    """Each named figure's value in each round."""

    def __init__(self):
        self.values = {}

    def add(self, key, value):
        if value is not None:
            self.values.setdefault(key, []).append(value)

    def get(self, key):
        v = self.values.get(key)
        return (statistics.median(v), min(v), max(v)) if v else None


def weft_round(a, wanted, figures, raw):
    bench = a.bench
    it = str(a.iterations)
    sync = [w for w in ("w1", "w2", "w4", "w5", "w7") if w in wanted]
    runs = []
    if sync:
        runs.append(("sync", [bench, "--only", ",".join(sync), "--iterations", it, "--reps", "5"]))
    exits = [w for w in ("w1", "w4") if w in wanted]
    if exits:
        runs.append(("exit", [bench, "--only", ",".join(exits), "--iterations", it,
                              "--durability", "exit"]))
    if "w6" in wanted:
        runs.append(("sync", [bench, "--only", "w6", "--workers", "4", "--slots", "8",
                              "--runs", "1000", "--batches", "3"]))
    if "w8" in wanted:
        runs.append(("sync", [bench, "--only", "w8"]))
    if "soak" in wanted:
        runs.append(("sync", [bench, "--only", "w6", "--workers", "4", "--slots", "8",
                              "--runs", "1000", "--batches", "20"]))
    if "w9" in wanted:
        runs.append(("sync", [bench, "--only", "w9", "--w9-corpus", a.w9_corpus, "--iterations", it]))
    if "w10" in wanted:
        runs.append(("sync", [bench, "--only", "w10", "--iterations", "1"]))
    if "w11" in wanted:
        runs.append(("sync", [bench, "--only", "w11", "--iterations", it]))
    for durability, cmd in runs:
        for line in run(cmd, label=f"weft-bench {' '.join(cmd[1:])}"):
            line["durability"] = durability
            raw.append(line)
            key, fig, med = line["workload"], line.get("figure"), line["median_s"]
            tag = f"weft_{durability}"
            if key == "w1":
                figures.add(("w1", tag), fig)
            elif key in ("w2_1000", "w2_10000"):
                figures.add((key, tag), fig)
            elif key == "w4":
                figures.add(("w4", tag), fig)
            elif key == "w4_one":
                figures.add(("w4_transfer", tag), med * 1e3)
            elif key == "w4_beyond":
                figures.add(("w4_beyond", tag), fig)
            elif key == "w4_again":
                figures.add(("w4_again", tag), med * 1e3)
            elif key == "w5":
                figures.add(("w5", tag), med * 1e3)
            elif key == "w6" and "× 20 batches" not in line.get("label", ""):
                figures.add(("w6", tag), fig)
                rss = re.search(r"peak RSS (\d+) MB", line.get("label", ""))
                figures.add(("w6_rss", tag), int(rss.group(1)) if rss else None)
            elif key == "w6_soak":
                figures.add(("soak_kb", tag), fig)
                rates = re.search(r"(\d+) runs/s in the first quarter, (\d+) in the last",
                                  line.get("label", ""))
                if rates:
                    figures.add(("soak_first", tag), float(rates.group(1)))
                    figures.add(("soak_last", tag), float(rates.group(2)))
                cpu = re.search(r"CPU a run (\d+) µs in the first quarter, (\d+) µs in the last",
                                line.get("label", ""))
                if cpu:
                    figures.add(("soak_cpu_first", tag), float(cpu.group(1)))
                    figures.add(("soak_cpu_last", tag), float(cpu.group(2)))
            elif key == "w7":
                figures.add(("w7_p50", tag), med * 1e6)
                figures.add(("w7_p99", tag), fig)
            elif key == "w8_edge":
                figures.add(("w8", tag), fig)
            elif key in ("w8_loop", "w8_script_repetitive", "w8_script_unique"):
                figures.add((key, tag), fig)
            elif key == "w9_build":
                figures.add(("w9_build", tag), med * 1e3)
            elif key == "w9_query":
                figures.add(("w9_p50", tag), med * 1e6)
                figures.add(("w9_p99", tag), fig)
            elif key == "w9_recall":
                figures.add(("w9_recall", tag), fig)
            elif key in ("w10", "w10_429", "w10_failed", "w10_cost"):
                figures.add((key, tag), fig)
            elif key == "w11":
                figures.add(("w11_p50", tag), med * 1e6)
                figures.add(("w11_p99", tag), fig)
            elif key == "w11_cpu":
                figures.add(("w11_cpu", tag), fig)


def median_of(times):
    return statistics.median(times) if times else None


def langgraph_round(a, wanted, figures, raw):
    py, cwd = a.python, a.peers
    env = dict(os.environ)
    it = str(a.iterations)

    def one(script, *args, tag="langgraph", extra_env=None):
        e = dict(env, **(extra_env or {}))
        lines = run([py, script, *args], cwd=cwd, env=e, label=f"langgraph {script} {' '.join(args)}")
        for line in lines:
            line["tag"] = tag
            raw.append(line)
        return lines[-1] if lines else {}

    def chain(key, script, nodes):
        """A chain's time per node, without and with the checkpointer."""
        for variant, tag in (("default", "langgraph"), ("ckpt", "langgraph_ckpt")):
            r = one(script, "--iters", it, "--variant", variant, tag=tag)
            m = median_of(r.get("times_s"))
            figures.add((key, tag), m * 1e6 / nodes if m else None)

    if "w1" in wanted:
        chain("w1", "langgraph_w1_chain.py", 200)
    if "w2" in wanted:
        for n, iters in ((1000, "3"), (10000, "1")):
            r = one("langgraph_w2_map.py", "--n", str(n), "--variant", "sync", "--iters", iters)
            m = median_of(r.get("times_s"))
            figures.add((f"w2_{n}", "langgraph"), n / m if m else None)
    if "w4" in wanted:
        chain("w4", "langgraph_w4_bigstate.py", 20)
    if "w5" in wanted:
        starts = []
        for _ in range(3):
            r = one("langgraph_w5_cold.py", extra_env={"BENCH_T0_NS": str(time.time_ns())})
            starts.append(r.get("first_result_s"))
        starts = [s for s in starts if s is not None]
        figures.add(("w5", "langgraph"), median_of(starts) * 1e3 if starts else None)
    if "w9" in wanted:
        # LangChain's EnsembleRetriever, in the LangGraph column: the peer.
        r = one("langchain_w9_retrieval.py", a.w9_corpus, "--iters", it)
        builds, queries = r.get("build_s") or [], sorted(r.get("query_s") or [])
        figures.add(("w9_build", "langgraph"), median_of(builds) * 1e3 if builds else None)
        if queries:
            figures.add(("w9_p50", "langgraph"), queries[len(queries) // 2] * 1e6)
            figures.add(("w9_p99", "langgraph"), queries[min(len(queries) * 99 // 100, len(queries) - 1)] * 1e6)
        figures.add(("w9_recall", "langgraph"), r.get("recall_at_5"))
    if "w8" in wanted:
        for mode, tag in (("full", "langgraph_ckpt"), ("add", "langgraph_add")):
            r = one("langgraph_w8_chat.py", "200", mode, tag=tag)
            w = r.get("written_bytes")
            figures.add(("w8", tag), w / 2**20 if w is not None else None)


def callgrind(bench, args):
    """The instructions weft-bench executes with ARGS, under callgrind."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", bench, *args]
        print(f"  callgrind weft-bench {' '.join(args)}", file=sys.stderr, flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
        m = re.search(r"Collected\s*:\s*(\d+)", done.stderr)
        if not m:
            sys.exit(f"callgrind printed no total:\n{done.stderr[-2000:]}")
        return int(m.group(1))


def instruction_counts(a, wanted):
    """Instructions per node: the difference between three timed runs and
    one, so the process's start and the cluster's set-up cancel out."""
    counts = {}
    common = ["--workers", "2", "--slots", "32"]
    if "w1" in wanted:
        one = callgrind(a.bench, ["--only", "w1", "--iterations", "1", *common])
        three = callgrind(a.bench, ["--only", "w1", "--iterations", "3", *common])
        counts["w1"] = (three - one) / 2 / 200
    if "w2" in wanted:
        # One iteration maps 1,000 items, then 10,000.
        one = callgrind(a.bench, ["--only", "w2", "--iterations", "1", *common])
        three = callgrind(a.bench, ["--only", "w2", "--iterations", "3", *common])
        counts["w2"] = (three - one) / 2 / 11_000
    if "w4" in wanted:
        per = {}
        for nodes in (20, 1):
            c = ["--only", "w4", "--w4-chains", str(nodes), *common]
            one = callgrind(a.bench, [*c, "--iterations", "1"])
            three = callgrind(a.bench, [*c, "--iterations", "3"])
            per[nodes] = (three - one) / 2
        counts["w4"] = per[20] / 20
        counts["w4_transfer"] = per[1]
        counts["w4_beyond"] = (per[20] - per[1]) / 19
    return counts


def fmt(v, unit):
    if v is None:
        return "—"
    if unit in ("items/s", "runs/s") or abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def cell(figures, key, tag, unit):
    f = figures.get((key, tag))
    if f is None:
        return "—"
    m, lo, hi = f
    if lo == hi:
        return fmt(m, unit)
    return f"{fmt(m, unit)} ({fmt(lo, unit)}–{fmt(hi, unit)})"


# Rows: (key, workload, unit, higher is better, goal).
ROWS = [
    ("w1", "W1 chain, per node", "µs", False, "≤ 70 µs sync, ≤ 40 µs exit"),
    ("w2_1000", "W2 map, N = 1,000", "items/s", True, "≥ 150,000"),
    ("w2_10000", "W2 map, N = 10,000", "items/s", True, "≥ 150,000"),
    ("w4", "W4 10 MB state, per node", "µs", False, "≤ 1.5 × W1"),
    ("w4_beyond", "W4 per node beyond the transfer", "µs", False, "≤ 1.5 × W1"),
    ("w4_transfer", "W4 the input in and the result out (1 node)", "ms", False, "—"),
    ("w4_again", "W4 the same 10 MB input again, named by reference (1 node)", "ms", False, "—"),
    ("w5", "W5 cold start", "ms", False, "≤ 5 ms"),
    ("w6", "W6 1,000 concurrent 10-node runs (4 × 8 slots)", "runs/s", True, "≥ 2,000"),
    ("w6_rss", "W6 peak RSS, the whole harness (client, coordinator, workers)", "MB", False, "coordinator ≤ 150 MB"),
    ("soak_first", "W6 soak, 20,000 runs: rate of the first quarter", "runs/s", True, "flat"),
    ("soak_last", "W6 soak: rate of the last quarter", "runs/s", True, "flat"),
    ("soak_cpu_first", "W6 soak: CPU time a run takes, first quarter (the whole harness)", "µs", False, "flat"),
    ("soak_cpu_last", "W6 soak: CPU time a run takes, last quarter (each new run forgets an old one)", "µs", False, "flat"),
    ("soak_kb", "W6 soak: resident memory (less pages freed lazily) each finished run adds after warm-up", "KB", False, "≤ 4 KB"),
    ("w7_p50", "W7 teammate message, p50", "µs", False, "≤ 100 µs"),
    ("w7_p99", "W7 teammate message, p99", "µs", False, "≤ 300 µs"),
    ("w8", "W8 200-turn chat, written", "MiB", False, "≤ 2 MiB"),
    ("w8_loop", "W8 by a loop node, written", "MiB", False, "≤ 2 MiB"),
    ("w8_script_repetitive", "W8 by a loop node over a script (a process a turn), repetitive text, written", "MiB", False, "≤ 2 MiB"),
    ("w8_script_unique", "W8 by a loop node over a script, unique text, written", "MiB", False, "≤ 2 MiB"),
    ("w9_build", "W9 knowledge index build, 10,000 chunks (LangChain: BM25Retriever + InMemoryVectorStore)", "ms", False, "faster than the peer"),
    ("w9_p50", "W9 hybrid query, top 5, p50 (LangChain: EnsembleRetriever)", "µs", False, "faster than the peer"),
    ("w9_p99", "W9 hybrid query, top 5, p99", "µs", False, "faster than the peer"),
    ("w9_recall", "W9 recall@5, 200 labelled questions", "recall", True, "at least the peer's"),
    ("w10", "W10 500 llm items under a limit of 5,500/min (provider: 429 above 6,000): rate achieved", "% of the limit", True, "≥ 95%"),
    ("w10_429", "W10 429s the provider answered", "429s", False, "0"),
    ("w10_failed", "W10 items failed", "items", False, "0"),
    ("w10_cost", "W10 CPU per throttled task (the whole harness, with the limit less without)", "µs", False, "—"),
    ("w11_p50", "W11 100 streams at once: a piece from the endpoint's send to the watcher's receive, p50", "µs", False, "≤ 2 ms"),
    ("w11_p99", "W11 the same, p99", "µs", False, "≤ 10 ms"),
    ("w11_cpu", "W11 CPU a piece (the whole harness: 50 pieces a stream less 1)", "µs", False, "—"),
]


def ratio(figures, key, higher_better):
    """LangGraph's median over Weft's (sync), as 'how many times better'."""
    lg, weft = figures.get((key, "langgraph")), figures.get((key, "weft_sync"))
    if key == "w8":
        lg = figures.get((key, "langgraph_ckpt"))
    if not lg or not weft or not lg[0] or not weft[0]:
        return "—"
    r = weft[0] / lg[0] if higher_better else lg[0] / weft[0]
    return f"{r:.2f}×"


def table(figures, counts, a, wanted):
    keys = {k for (k, _) in figures.values}
    lines = [
        f"Measured {datetime.date.today().isoformat()} by `bench/compare.sh --rounds {a.rounds}` "
        f"on {os.cpu_count()} cores ({cpu_model()}): medians of {a.rounds} rounds, "
        "each round running both sides one after the other; the range of the rounds in brackets. "
        "Weft runs on an embedded cluster (a coordinator and two workers of 32 slots over gRPC "
        "on a Unix socket, Rust handlers); `sync` checkpoints every wave, `exit` only at the end. "
        "The last column is how many times better Weft (sync) is than LangGraph "
        "(below 1: worse; W8 against LangGraph with its SQLite checkpointer).",
        "",
        "| workload | unit | LangGraph | LangGraph + checkpointer | Weft sync | Weft exit | goal | Weft vs LangGraph |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, label, unit, higher, goal in ROWS:
        if key not in keys:
            continue
        lg = cell(figures, key, "langgraph", unit)
        ck = cell(figures, key, "langgraph_ckpt", unit)
        if key == "w8":
            add = figures.get((key, "langgraph_add"))
            if add:
                ck += f"; {fmt(add[0], unit)} with `operator.add`"
        lines.append(
            f"| {label} | {unit} | {lg} | {ck} | {cell(figures, key, 'weft_sync', unit)} "
            f"| {cell(figures, key, 'weft_exit', unit)} | {goal} | {ratio(figures, key, higher)} |"
        )
    if counts:
        lines += [
            "",
            "Instructions under callgrind (repeatable whatever the machine's load; three runs "
            "minus one, so start-up cancels out):",
            "",
            "| figure | instructions |",
            "|---|---|",
        ]
        names = {
            "w1": "W1 per node",
            "w2": "W2 per item (N = 1,000 and 10,000)",
            "w4": "W4 per node (input and result included)",
            "w4_beyond": "W4 per node beyond the transfer (20 nodes minus 1, over 19)",
            "w4_transfer": "W4 the input in and the result out (a 1-node run)",
        }
        for k, name in names.items():
            if k in counts:
                lines.append(f"| {name} | {counts[k]:,.0f} |")
    return "\n".join(lines) + "\n"


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def update(path, text):
    p = Path(path)
    body = p.read_text()
    if BEGIN not in body or END not in body:
        sys.exit(f"{path} has no {BEGIN} … {END} section to update")
    head, rest = body.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    p.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")
    print(f"updated {path}", file=sys.stderr)


def main():
    a = parse_args()
    # The peers run in their own folder: absolute paths (not resolved, so a
    # venv's python stays the venv's).
    a.bench, a.python, a.peers = map(os.path.abspath, (a.bench, a.python, a.peers))
    wanted = set(a.only.split(","))
    a.w9_corpus = os.path.abspath(a.w9_corpus)
    if "w9" in wanted:
        print(f"writing W9's corpus to {a.w9_corpus}", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, str(Path(a.peers) / "w9_corpus.py"), a.w9_corpus], check=True)
    figures, raw = Figures(), []
    for r in range(1, a.rounds + 1):
        print(f"round {r} of {a.rounds}", file=sys.stderr, flush=True)
        # Alternate which side goes first, so neither always meets a
        # machine still busy with the other.
        sides = [weft_round, langgraph_round]
        if r % 2 == 0:
            sides.reverse()
        for side in sides:
            side(a, wanted, figures, raw)
    counts = {}
    if not a.no_callgrind:
        counts = instruction_counts(a, wanted)
        raw.append({"engine": "weft", "workload": "callgrind", "instructions": counts})
    text = table(figures, counts, a, wanted)
    print(text)
    if a.raw:
        Path(a.raw).parent.mkdir(parents=True, exist_ok=True)
        with open(a.raw, "w") as f:
            for line in raw:
                f.write(json.dumps(line) + "\n")
        print(f"raw figures in {a.raw}", file=sys.stderr)
    for path in a.update:
        update(path, text)


if __name__ == "__main__":
    main()
