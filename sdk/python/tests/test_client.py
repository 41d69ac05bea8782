"""`weft.Client` against a real coordinator and worker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import weft
from conftest import OPERATOR, READER

ECHO = {
    "name": "echo",
    "state": {"n": {"type": "integer", "default": 1}},
    "nodes": {
        "double": {"kind": "script", "start": True, "end": True,
                   "run": ["sh", "-c", 'echo "{\\"n\\": 42}"']},
    },
}

APPROVAL = {
    "name": "publish",
    "state": {"draft": {"type": "string", "default": ""}},
    "nodes": {
        "write": {"kind": "script", "start": True, "next": "approve",
                  "run": ["sh", "-c", 'echo "{\\"draft\\": \\"hello\\"}"']},
        "approve": {"kind": "approval", "prompt": "Publish {{ draft }}?", "next": "publish"},
        "publish": {"kind": "script", "end": True, "run": ["sh", "-c", "echo {}"]},
    },
}


def test_a_dict_graph_is_submitted_and_waited_for(cluster):
    client = weft.Client(cluster.url)
    run = client.submit(ECHO, input={"n": 1})
    assert run.run_id.startswith("run-")
    result = run.wait(timeout=30)
    assert result.status == "completed"
    assert result.state == {"n": 42}
    assert result.error is None and result.done
    assert any(r.run_id == run.run_id for r in client.runs(status="completed"))


def test_a_runs_history_gives_each_waves_state_and_refuses_a_wave_not_kept(cluster):
    client = weft.Client(cluster.url)
    run = client.submit(ECHO, input={"n": 1})
    run.wait(timeout=30)
    history = run.history()
    assert [w.step for w in history.waves] == [0, 1]
    assert history.step == 1 and history.state == {"n": 42}
    assert history.waves[1].changed == ["n"] and history.waves[1].status == "completed"
    assert client.history(run.run_id, at=0).state == {"n": 1}
    with pytest.raises(weft.InvalidArgument, match="no wave 7 .*its waves: 0, 1"):
        run.history(at=7)

    async def asynchronously() -> weft.History:
        import weft.aio

        async with weft.aio.Client(cluster.url) as aio:
            return await aio.history(run.run_id, at=0)

    import asyncio

    assert asyncio.run(asynchronously()).state == {"n": 1}


def test_a_fork_goes_on_from_a_wave_with_a_field_replaced(cluster):
    chain = {
        "name": "log",
        "settings": {"strict_state": True},
        "state": {"log": {"type": "string", "default": ""},
                  "word": {"type": "string", "default": "a"}},
        "nodes": {
            "one": {"kind": "script", "start": True, "next": "two",
                    "run": ["sh", "-c", 'echo "{\\"log\\": \\"1\\"}"']},
            "two": {"kind": "script", "next": "three",
                    "run": ["sh", "-c", 'echo "{\\"log\\": \\"2\\"}"']},
            "three": {"kind": "script", "end": True,
                      "run": ["sh", "-c", 'echo "{\\"log\\": \\"3\\"}"']},
        },
    }
    client = weft.Client(cluster.url)
    original = client.submit(chain)
    assert original.wait(timeout=30).state == {"log": "3", "word": "a"}
    fork = original.fork(at=1, set={"word": "b"})
    done = fork.wait(timeout=30)
    assert done.state == {"log": "3", "word": "b"}
    assert done.forked_from == weft.ForkedFrom(original.run_id, 1)
    assert [w.step for w in fork.history().waves] == [1, 2, 3]
    assert original.get().forked_from is None
    with pytest.raises(weft.InvalidArgument, match="cannot set field 'wrod'"):
        client.fork(original.run_id, at=1, set={"wrod": "b"})

    async def asynchronously() -> weft.RunInfo:
        import weft.aio

        async with weft.aio.Client(cluster.url) as aio:
            run = await aio.fork(original.run_id, at=2)
            return await run.wait(timeout=30)

    import asyncio

    assert asyncio.run(asynchronously()).forked_from == weft.ForkedFrom(original.run_id, 2)


def test_a_map_forked_at_a_point_within_its_wave_keeps_its_finished_items(cluster):
    multiply = ("import json, sys, time; t = json.load(sys.stdin); time.sleep(0.3); "
                "print(json.dumps({'product': t['scope']['n'] * t['state']['factor']}))")
    graph = {
        "name": "times",
        "state": {"numbers": {"type": "array", "default": [1, 2, 3]},
                  "factor": {"type": "integer", "default": 2},
                  "products": {"type": "array", "default": []}},
        "nodes": {
            "times": {"kind": "map", "start": True, "over": "state.numbers", "as": "n",
                      "branch": "multiply", "output_key": "product",
                      "collect_into": "products", "max_concurrency": 1},
            "multiply": {"kind": "script", "run": ["python3", "-c", multiply]},
        },
    }
    client = weft.Client(cluster.url)
    original = client.submit(graph)
    assert original.wait(timeout=60).state["products"] == [2, 4, 6]
    finished = [e.seq for e in original.events() if e.type == "map_item_finished"]
    points = [w for w in original.history().waves if w.point > 0]
    # The point where exactly one item had finished, named as text.
    point = next(w for w in points if sum(1 for seq in finished if seq < w.point) == 1)
    assert point.at == f"0.{point.point}"
    assert client.history(original.run_id, at=point.at).point == point.point
    fork = original.fork(at=point.at, set={"factor": 10})
    done = fork.wait(timeout=60)
    assert done.state["products"] == [2, 20, 30]
    assert done.forked_from == weft.ForkedFrom(original.run_id, 0, point.point)
    assert done.forked_from.at == point.at
    with pytest.raises(ValueError, match="not a place in a run's history"):
        original.history(at="0.x")


def test_a_run_is_submitted_with_a_priority_and_a_wrong_one_refused(cluster):
    client = weft.Client(cluster.url)
    run = client.submit(ECHO, input={"n": 1}, priority="low")
    assert run.wait(timeout=30).status == "completed"
    with pytest.raises(ValueError, match="not one of high, normal, low"):
        client.submit(ECHO, priority="urgent")


def test_a_cached_step_answers_the_next_run_unless_no_cache_is_asked(cluster):
    # A key of its own per test session: an earlier session's entry
    # cannot answer.
    key = f"{os.getpid()}-{{{{ n }}}}"
    cached = {
        "name": "cached",
        "state": {"n": {"type": "integer", "default": 1}},
        "nodes": {
            "double": {"kind": "script", "start": True, "end": True,
                       "run": ["sh", "-c", 'echo "{\\"n\\": 42}"'],
                       "cache": {"key": key, "ttl": "1h"}},
        },
    }
    client = weft.Client(cluster.url)

    def cached_events(run: weft.Run) -> list[weft.Event]:
        run.wait(timeout=30)
        return [e for e in run.events() if e.type == "node_cached"]

    first = client.submit(cached, input={"n": 1})
    assert cached_events(first) == []
    second = client.submit(cached, input={"n": 1})
    [hit] = cached_events(second)
    assert hit["node"] == "double" and hit["stored_by"] == first.run_id
    assert second.wait(timeout=30).state == {"n": 42}
    assert cached_events(client.submit(cached, input={"n": 1}, no_cache=True)) == []

    async def from_aio() -> list[str]:
        async with weft.aio.Client(cluster.url) as aio:
            run = await aio.submit(cached, input={"n": 1}, no_cache=True)
            await run.wait(timeout=30)
            return [e.type async for e in run.events()]

    import asyncio

    kinds = asyncio.run(from_aio())
    assert "node_finished" in kinds and "node_cached" not in kinds


def test_events_come_typed_and_in_order(cluster):
    client = weft.Client(cluster.url)
    run = client.submit(ECHO)
    events = list(run.events())
    assert [e.seq for e in events] == list(range(len(events)))
    assert events[0].type == "run_submitted"
    assert events[-1].type == "run_finished" and events[-1]["status"] == "completed"
    started = next(e for e in events if e.type == "node_started")
    assert (started["node"], started["attempt"], started["item"]) == ("double", 1, None)
    changed = next(e for e in events if e.type == "state_changed")
    assert changed["values"] == {"n": 42}


def test_an_approval_is_resumed_from_python(cluster):
    client = weft.Client(cluster.url)
    run = client.submit(APPROVAL)
    waiting = run.wait(timeout=30)
    assert waiting.status == "waiting"
    assert waiting.waiting == [weft.WaitingNode("approve", "approval", "Publish hello?")]
    with pytest.raises(weft.Rejected):
        client.resume(run.run_id, "write", "approve")
    client.resume(run.run_id, "approve", "approve", comment="fine")
    done = run.wait(timeout=30)
    assert done.status == "completed"
    assert done.state["approved_comment"] == "fine"
    assert done.answers == [weft.Answer("approve", "anonymous", True)]


def test_cancel_and_retry(cluster, tmp_path):
    client = weft.Client(cluster.url)
    long = {"name": "long", "nodes": {"wait": {"kind": "script", "start": True, "end": True, "run": ["sleep", "60"]}}}
    run = client.submit(long)
    next(e for e in run.events() if e.type == "node_started")
    assert client.cancel(run.run_id).status == "cancelled"
    mark = tmp_path / "tried"
    flaky = {"name": "flaky", "nodes": {"once": {
        "kind": "script", "start": True, "end": True,
        "run": ["sh", "-c", f'if [ -e {mark} ]; then echo "{{}}"; else touch {mark}; exit 3; fi']}}}
    failed = client.submit(flaky).wait(timeout=30)
    assert failed.status == "failed" and failed.error is not None
    client.retry(failed.run_id)
    assert client.run(failed.run_id).wait(timeout=30).status == "completed"


def test_an_invalid_graph_raises_with_its_findings(cluster):
    client = weft.Client(cluster.url)
    with pytest.raises(weft.GraphInvalid) as raised:
        client.submit({"nodes": {"a": {"kind": "script"}}})
    findings = raised.value.findings
    assert any("requires `run: [argv…]`" in f for f in findings), findings
    assert all(f.startswith(("error:", "warning:")) for f in findings)
    assert client.validate(ECHO) == []


def test_an_unknown_run_and_bad_input_are_named(cluster):
    client = weft.Client(cluster.url)
    with pytest.raises(weft.RunNotFound, match="unknown run 'run-nope'"):
        client.get("run-nope")
    with pytest.raises(weft.InvalidArgument, match="invalid input"):
        client.submit(ECHO, input={"n": "many"})


def test_a_graph_file_travels_with_the_files_it_names(cluster, tmp_path):
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "answer.sh"
    script.write_text('#!/bin/sh\necho "{\\"n\\": 7}"\n')
    script.chmod(0o755)
    graph = tmp_path / "answer.yaml"
    graph.write_text("name: answer\nstate:\n  n: {type: integer, default: 0}\nnodes:\n"
                     "  a: {kind: script, start: true, end: true, run: [sh, scripts/answer.sh]}\n")
    bundle = weft.GraphBundle.from_file(graph)
    assert [path for path, _, _ in bundle.files] == ["answer.yaml", "scripts/answer.sh"]
    client = weft.Client(cluster.url)
    assert client.submit(graph).wait(timeout=30).state == {"n": 7}


def test_a_link_out_of_the_graphs_directory_is_refused(tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("token")
    (tmp_path / "graph").mkdir()
    os.symlink(outside, tmp_path / "graph" / "notes.txt")
    graph = tmp_path / "graph" / "g.yaml"
    graph.write_text("nodes:\n  a: {kind: script, start: true, run: [cat, notes.txt]}\n")
    with pytest.raises(weft.BundleError, match="outside the graph's directory"):
        weft.GraphBundle.from_file(graph)
    assert len(weft.GraphBundle.from_file(graph, allow_outside_links=True).files) == 2


def test_identities_are_required_and_roles_enforced(secured, monkeypatch):
    with pytest.raises(weft.Unauthenticated):
        weft.Client(secured.url).runs()
    with pytest.raises(weft.Unauthenticated):
        weft.Client(secured.url, token="nope").runs()
    with pytest.raises(weft.PermissionDenied, match="Submit needs the role operator or admin"):
        weft.Client(secured.url, token=READER).submit(ECHO)
    monkeypatch.setenv("WEFT_COORDINATOR", secured.url)
    monkeypatch.setenv("WEFT_TOKEN", OPERATOR)
    client = weft.Client()
    run = client.submit(ECHO)
    assert run.wait(timeout=30).submitted_by == "ops"
    assert weft.Client(secured.url, token=READER).get(run.run_id).status == "completed"


def test_an_unreachable_coordinator_is_unavailable():
    with pytest.raises(weft.Unavailable):
        weft.Client("http://127.0.0.1:9").runs()


DOUBLE = {
    "name": "double",
    "state": {"n": {"type": "integer"}},
    "nodes": {"twice": {"kind": "script", "start": True, "end": True, "run": [
        "python3", "-c", "import json,sys; s=json.load(sys.stdin)['state']; print(json.dumps({'n': s['n'] * 2}))"]}},
}


def test_one_client_serves_several_threads_at_once(cluster):
    from concurrent.futures import ThreadPoolExecutor

    client = weft.Client(cluster.url)

    def submit_and_wait(n: int) -> int:
        run = client.submit(DOUBLE, input={"n": n})
        kinds = [event.type for event in run.events()]
        assert kinds[0] == "run_submitted" and kinds[-1] == "run_finished", kinds
        return run.wait(timeout=60).state["n"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        doubled = list(pool.map(submit_and_wait, range(24)))
    assert doubled == [n * 2 for n in range(24)]


LONG = {"name": "long", "nodes": {"wait": {"kind": "script", "start": True, "end": True, "run": ["sleep", "60"]}}}


def test_a_wait_times_out_and_ctrl_c_stops_a_blocking_call(cluster):
    import signal
    import subprocess
    import sys

    client = weft.Client(cluster.url)
    run = client.submit(LONG)
    with pytest.raises(TimeoutError, match=f"run {run.run_id} did not end within 0.3 s"):
        run.wait(timeout=0.3)
    # A program blocked in a call (the interpreter let go) still answers
    # Ctrl-C.
    waiter = subprocess.Popen(
        [sys.executable, "-c", "import sys, weft\n"
         "client = weft.Client(sys.argv[1])\nprint('waiting', flush=True)\nclient.wait(sys.argv[2])\n",
         cluster.url, run.run_id],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert waiter.stdout.readline() == "waiting\n"
    waiter.send_signal(signal.SIGINT)
    _, stderr = waiter.communicate(timeout=30)
    assert waiter.returncode != 0 and "KeyboardInterrupt" in stderr, stderr
    assert client.cancel(run.run_id).status == "cancelled"


def test_a_graph_file_that_does_not_validate_is_answered_with_its_findings(cluster, tmp_path):
    graph = tmp_path / "broken.yaml"
    graph.write_text("nodes:\n  a: {kind: script, start: true}\n")
    client = weft.Client(cluster.url)
    findings = client.validate(graph)
    assert any(f.startswith("error:") and "requires `run: [argv…]`" in f for f in findings), findings
    # The coordinator's own findings, for a dict.
    findings = client.validate({"nodes": {"a": {"kind": "script", "start": True}}})
    assert any(f.startswith("error:") and "requires `run: [argv…]`" in f for f in findings), findings


def test_a_closed_client_says_so_and_a_bad_url_is_refused(cluster):
    client = weft.Client(cluster.url)
    assert client.runs(limit=1) is not None
    client.close()
    with pytest.raises(weft.WeftError, match="the client is closed"):
        client.runs()
    with pytest.raises(ValueError, match="must start with http:// or https://"):
        weft.Client("ftp://127.0.0.1:1")
    with pytest.raises(TypeError, match="the input is not JSON"):
        weft.Client(cluster.url).submit(ECHO, input={"n": object()})
