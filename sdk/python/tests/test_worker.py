"""`weft.Worker`: Python handlers serving a real coordinator, beside a Rust
worker, through kills and drains. Each Python worker is a process
(`handlers.py`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

import weft
from conftest import HANDLERS, NODE, OPERATOR

def python_worker(cluster, name: str, token: str | None = None) -> subprocess.Popen:
    return cluster.add_python_worker(name, token)


@pytest.fixture(scope="module")
def py_a(cluster):
    """The module's cluster, with the Python worker `py-a` beside its Rust
    worker."""
    python_worker(cluster, "py-a")
    return cluster


def wait_for(condition, patience: float = 30) -> None:
    deadline = time.monotonic() + patience
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)


def task_graph(handler: str, **extra) -> dict:
    node = {"kind": "task", "handler": handler, "start": True, "end": True, **extra}
    return {"name": handler, "nodes": {"only": node}}


def test_a_python_handler_serves_a_task(py_a):
    client = weft.Client(py_a.url)
    graph = task_graph("shout")
    graph["state"] = {"text": {"type": "string"}, "seen": {"type": "object", "default": {}}}
    result = client.submit(graph, input={"text": "hello"}).wait(timeout=30)
    assert result.status == "completed", result.error
    assert result.state["text"] == "HELLO"
    assert result.state["seen"]["node"] == "only" and result.state["seen"]["attempt"] == 1
    assert isinstance(result.state["seen"]["key"], int)
    assert result.state["seen"]["config"]["handler"] == "shout", result.state["seen"]
    assert result.state["seen"]["item"] is None and result.state["seen"]["scope"] == {}
    async_graph = task_graph("wait_async") | {"state": {"waited": {"type": "boolean", "default": False}}}
    async_result = client.submit(async_graph).wait(timeout=30)
    assert async_result.state["waited"] is True


def test_a_map_branch_runs_on_the_python_worker_beside_a_rust_one(py_a):
    client = weft.Client(py_a.url)
    graph = {
        "name": "squares",
        "state": {"numbers": {"type": "array"}, "squares": {"type": "array", "default": []},
                  "total": {"type": "integer", "default": 0}},
        "nodes": {
            "fan": {"kind": "map", "start": True, "over": "{{ numbers }}", "as": "n", "branch": "square",
                    "output_key": "squared", "collect_into": "squares", "max_concurrency": 4, "next": "sum"},
            "square": {"kind": "task", "handler": "square"},
            # A script: the Rust worker's.
            "sum": {"kind": "script", "end": True,
                    "run": ["python3", "-c",
                            "import json,sys; s=json.load(sys.stdin)['state']; "
                            "print(json.dumps({'total': sum(x['n'] for x in s['squares'])}))"]},
        },
    }
    numbers = list(range(20))
    result = client.submit(graph, input={"numbers": numbers}).wait(timeout=60)
    assert result.status == "completed", result.error
    assert [s["n"] for s in result.state["squares"]] == [n * n for n in numbers]
    assert [s["index"] for s in result.state["squares"]] == numbers
    assert {s["by"] for s in result.state["squares"]} <= {"py-a"}
    assert result.state["total"] == sum(n * n for n in numbers)


def test_teammates_send_and_receive_through_a_python_handler(py_a):
    client = weft.Client(py_a.url)
    graph = {
        "name": "team",
        "state": {"items": {"type": "array"}, "all_said": {"type": "array", "default": []}},
        "nodes": {
            "team": {"kind": "map", "start": True, "over": "{{ items }}", "as": "item", "branch": "converse",
                     "output_key": "said", "collect_into": "all_said"},
            "converse": {"kind": "task", "handler": "converse", "teammates": True},
        },
    }
    result = client.submit(graph, input={"items": [1, 2, 3]}).wait(timeout=60)
    assert result.status == "completed", result.error
    said = result.state["all_said"]
    assert said[0] == {"me": "team/0", "heard": ["team/1", "team/2"], "stranger": ""}
    assert said[2]["heard"] == ["team/0", "team/1"]
    assert said[1]["stranger"] == "'nobody/0' is not a member of this team (members: team/0, team/1, team/2)"
    sent = [e for e in client.run(result.run_id).events() if e.type == "message_sent"]
    assert len(sent) == 6, sent


def test_one_maps_teammates_talk_across_a_python_and_a_rust_worker():
    from conftest import Cluster, binary

    cluster = Cluster()
    try:
        python_worker(cluster, "py-ring")
        cluster.spawn("rs-ring", [str(binary("test-worker")), "--coordinator", cluster.url, "--name", "rs-ring",
                                  "--slots", "2", "--only", "pass_along", "--work-dir", str(cluster.dir / "rs-ring")])
        cluster.wait_for_log("rs-ring", "joined the coordinator")
        graph = {
            "name": "ring",
            "state": {"items": {"type": "array"}, "all": {"type": "array", "default": []}},
            "nodes": {
                "ring": {"kind": "map", "start": True, "end": True, "over": "{{ items }}", "as": "item",
                         "branch": "pass_along", "output_key": "passed", "collect_into": "all",
                         "max_concurrency": 6},
                "pass_along": {"kind": "task", "handler": "pass_along", "teammates": True},
            },
        }
        client = weft.Client(cluster.url)
        result = client.submit(graph, input={"items": list(range(6))}).wait(timeout=60)
        assert result.status == "completed", result.error
        passed = result.state["all"]
        # Six items on six slots (four Python, two Rust) at once: each
        # heard from its predecessor, whichever worker either ran on.
        assert [p["got"] for p in passed] == [{"from": f"ring/{(i - 1) % 6}"} for i in range(6)], passed
        assert {p["by"] for p in passed} == {"py-ring", "rs-ring"}, passed
    finally:
        cluster.stop()


def reducer_graph(reducer: str) -> dict:
    def writes(text: str) -> dict:
        return {"kind": "script", "run": ["sh", "-c", f'echo "{{\\"best\\": \\"{text}\\"}}"'], "next": "end"}

    return {
        "name": "reduce",
        "state": {"best": {"type": "string", "default": "", "reducer": reducer}},
        "nodes": {
            "start": {"kind": "script", "start": True, "run": ["sh", "-c", "echo {}"], "next": ["a", "b"]},
            "a": writes("short"),
            "b": writes("much longer"),
            "end": {"kind": "script", "end": True, "run": ["sh", "-c", "echo {}"]},
        },
    }


def test_a_python_function_reduces_a_waves_writes(py_a):
    client = weft.Client(py_a.url)
    result = client.submit(reducer_graph("fn:longest")).wait(timeout=30)
    assert result.status == "completed", result.error
    assert result.state["best"] == "much longer"
    failed = client.submit(reducer_graph("fn:broken")).wait(timeout=30)
    assert failed.status == "failed"
    assert "fn:broken failed: RuntimeError: no" in failed.error.message, failed.error


def test_a_handler_exception_fails_the_attempt_with_its_traceback(py_a):
    client = weft.Client(py_a.url)
    result = client.submit(task_graph("explode")).wait(timeout=30)
    assert result.status == "failed"
    message = result.error.message
    assert "ValueError: boom at 3" in message, message
    assert "in explode" in message and "in deeper" in message, message
    assert "concurrent/futures" not in message, message


def test_an_async_handlers_exception_fails_the_attempt_with_its_own_frames(py_a):
    client = weft.Client(py_a.url)
    result = client.submit(task_graph("raise_async")).wait(timeout=30)
    assert result.status == "failed"
    message = result.error.message
    assert "handler_error: Traceback (most recent call last):\n" in message, message
    assert "in raise_async" in message and "LookupError: nothing here" in message, message
    assert "asyncio" not in message and "concurrent/futures" not in message, message


def test_a_handler_returning_what_is_not_json_fails_saying_so(py_a):
    client = weft.Client(py_a.url)
    result = client.submit(task_graph("not_json")).wait(timeout=30)
    assert result.status == "failed"
    assert "the handler returned what is not JSON: " in result.error.message, result.error
    assert "date" in result.error.message, result.error


def test_a_handler_that_never_returns_times_out_and_the_worker_serves_on(py_a):
    client = weft.Client(py_a.url)
    blocked = [client.submit(task_graph("blocks", timeout="1s")) for _ in range(5)]
    for run in blocked:
        result = run.wait(timeout=30)
        assert result.status == "failed", result
        assert "timed out" in result.error.message, result.error
    # Five stuck calls, more than the worker's four slots: each timed-out
    # attempt gave its slot back, and the worker still serves.
    graph = task_graph("shout")
    graph["state"] = {"text": {"type": "string"}, "seen": {"type": "object", "default": {}}}
    assert client.submit(graph, input={"text": "on"}).wait(timeout=30).state["text"] == "ON"


def test_a_sync_handlers_thread_keeps_its_threading_local_between_calls(py_a):
    # Twenty calls one after another on the few threads sync handlers run
    # on: a thread's second call finds what its first kept there.
    nodes = {f"n{i}": {"kind": "task", "handler": "counts_calls", "next": f"n{i + 1}"} for i in range(20)}
    nodes["n0"]["start"] = True
    nodes["n19"] = {"kind": "task", "handler": "counts_calls", "end": True}
    graph = {"name": "counts", "state": {"calls": {"type": "array", "default": []}}, "nodes": nodes}
    result = weft.Client(py_a.url).submit(graph).wait(timeout=60)
    assert result.status == "completed", result.error
    calls = result.state["calls"]
    assert len(calls) == 20 and max(calls) > 1, calls


def slow_graph() -> dict:
    graph = task_graph("slow")
    graph["state"] = {"marks": {"type": "string"}, "seconds": {"type": "number"},
                      "finished_by": {"type": "string", "default": ""}}
    return graph


def test_a_python_worker_killed_mid_task_loses_nothing(tmp_path):
    from conftest import Cluster

    cluster = Cluster()
    try:
        doomed = python_worker(cluster, "py-doomed")
        client = weft.Client(cluster.url)
        run = client.submit(slow_graph(), input={"marks": str(tmp_path), "seconds": 2})
        wait_for(lambda: (tmp_path / "started-py-doomed").exists())
        python_worker(cluster, "py-rescue")
        doomed.kill()
        result = run.wait(timeout=60)
        assert result.status == "completed", result.error
        assert result.state["finished_by"] == "py-rescue"
        assert (tmp_path / "started-py-rescue").exists()
    finally:
        cluster.stop()


def test_sigterm_drains_a_python_worker(tmp_path):
    from conftest import Cluster

    cluster = Cluster()
    try:
        worker = python_worker(cluster, "py-drain")
        client = weft.Client(cluster.url)
        run = client.submit(slow_graph(), input={"marks": str(tmp_path), "seconds": 1.5})
        wait_for(lambda: (tmp_path / "started-py-drain").exists())
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
        result = run.wait(timeout=10)
        assert result.status == "completed" and result.state["finished_by"] == "py-drain"
        assert b"py-drain stopped" in worker.stdout.read()
    finally:
        cluster.stop()


def test_a_python_worker_joins_with_its_token(secured):
    python_worker(secured, "py-secure", token=NODE)
    client = weft.Client(secured.url, token=OPERATOR)
    graph = task_graph("shout")
    graph["state"] = {"text": {"type": "string"}, "seen": {"type": "object", "default": {}}}
    assert client.submit(graph, input={"text": "x"}).wait(timeout=30).state["text"] == "X"
    refused = subprocess.run([sys.executable, str(HANDLERS), secured.url, "py-nobody"], capture_output=True,
                             timeout=30)
    assert refused.returncode != 0
    assert b"requires an identity" in refused.stderr, refused.stderr
