"""W5 cold start: process start -> import langgraph -> build+compile a 1-node graph -> first result.
first_result_s is measured from BENCH_T0_NS (set by bench/compare.py just before spawning the process)."""
import time
T_MAIN = time.time_ns()
import common as C
t = C.now()
from typing import TypedDict
from langgraph.graph import StateGraph, START, END
t_imp = C.now() - t


class S(TypedDict):
    counter: int


g = StateGraph(S)
g.add_node("only", lambda s: {"counter": s["counter"] + 1})
g.add_edge(START, "only")
g.add_edge("only", END)
app = g.compile()
out = app.invoke({"counter": 0})
T_FIRST = time.time_ns()
t0 = C.t0_ns()
C.emit("langgraph", "W5_cold", "default", {}, ok=out["counter"] == 1,
       first_result_s=(T_FIRST - t0) / 1e9 if t0 else None,
       interp_start_s=(T_MAIN - t0) / 1e9 if t0 else None, import_s=t_imp,
       times_s=[(T_FIRST - t0) / 1e9] if t0 else [])
