"""`@worker.tool`: agent tools written in Python. The agent runs on a Rust
worker whose model is a local OpenAI-compatible test endpoint (below); the
tools run on a Python worker (`handlers.py`), each call passed on by the
coordinator."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

import weft
from conftest import Cluster

KEY = "sk-python-tools"


Calls = list[tuple[str, dict[str, Any]]]


class Model:
    """A scripted chat endpoint: the first turn of a conversation calls the
    tools `calls` names; the next answers with the tool results joined by
    ` | `. Keeps every request."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self.requests: list[dict[str, Any]] = []
        model = self

        class Endpoint(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if self.headers.get("authorization") != f"Bearer {KEY}":
                    return self.reply(401, {"error": {"message": "bad key"}})
                model.requests.append(body)
                self.reply(200, model.complete(body["messages"]))

            def reply(self, status: int, body: dict[str, Any]) -> None:
                text = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def complete(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if results:
            message = {"role": "assistant", "content": " | ".join(results)}
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for i, (name, args) in enumerate(self.calls)
            ]}
        return {"id": "c", "object": "chat.completion", "model": "tiny",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    started = Model([("lookup", {"key": "a"}), ("lookup", {"key": "ctx"}), ("lookup", {"key": "zzz"}),
                     ("lookup_async", {"key": "b"}), ("lookup", {"wrong": 1})])
    yield started
    started.server.shutdown()


def with_model(model: Model, tools: str, slots: int = 2) -> tuple[Cluster, subprocess.Popen[bytes]]:
    """A cluster with a Rust worker `brain` that asks `model` and hosts no
    tool, and a Python worker `tools` that hosts the tools and no model."""
    cluster = Cluster()
    cluster.add_worker("brain", slots=slots, env={"OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": KEY,
                                                  "WEFT_MODEL": "tiny"})
    return cluster, cluster.add_python_worker(tools)


def agent(tool: str) -> dict[str, Any]:
    """A graph of one agent step that may call `tool`."""
    return {"name": tool, "state": {"answer": {"type": "string", "default": ""}},
            "nodes": {"ask": {"kind": "agent", "start": True, "end": True, "prompt": "Go.",
                              "tools": [tool], "state_updates": {"answer": "{{ output }}"}}}}


@pytest.fixture(scope="module")
def agents(model: Model) -> Iterator[Cluster]:
    started, _ = with_model(model, "py-tools")
    yield started
    started.stop()


def research(items: list[str]) -> dict[str, Any]:
    return {
        "name": "research",
        "state": {"topics": {"type": "array"}, "answers": {"type": "array", "default": []}},
        "nodes": {
            "fan": {"kind": "map", "start": True, "end": True, "over": "{{ topics }}", "as": "topic",
                    "branch": "ask", "output_key": "answer", "collect_into": "answers"},
            "ask": {"kind": "agent", "prompt": "Look up {{ topic }}.", "tools": ["lookup", "lookup_async"],
                    "max_turns": 3, "state_updates": {"answer": "{{ output }}"}},
        },
    }


def test_an_agent_on_a_rust_worker_calls_tools_a_python_worker_hosts(agents: Cluster, model: Model):
    client = weft.Client(agents.url)
    result = client.submit(research(["x", "y"]), input={"topics": ["x", "y"]}).wait(timeout=60)
    assert result.status == "completed", result.error
    assert len(result.state["answers"]) == 2
    for index, answer in enumerate(result.state["answers"]):
        found, context, missing, looped, invalid = answer.split(" | ")
        assert found == "alpha"
        context = json.loads(context)
        assert context["worker"] == "py-tools"
        assert (context["node"], context["attempt"], context["item"]) == ("ask", 1, index)
        assert context["scope"]["topic"] == ["x", "y"][index]
        assert isinstance(context["task_key"], int)
        assert missing == "error: KeyError: \"no entry for 'zzz'\""
        assert json.loads(looped) == {"value": "beta"}
        # Checked against the schema the Python worker announced, on the
        # agent's side, before a call goes out.
        assert invalid.startswith("error: invalid arguments at ''"), invalid
    offered = {tool["function"]["name"]: tool["function"] for tool in model.requests[0]["tools"]}
    assert offered["lookup"]["description"] == "Look a key up in the reference table."
    assert offered["lookup"]["parameters"]["required"] == ["key"]
    assert offered["lookup_async"]["description"] == "The same table, looked up on the event loop."
    events = list(client.events(result.run_id))
    called = [event for event in events if event.type == "tool_called"]
    assert len(called) == 10
    assert sum(1 for event in called if event.get("error")) == 4
    finished = [event for event in events if event.type == "node_finished" and event.get("node") == "ask"]
    assert len(finished) == 2 and {event.get("worker") for event in finished} == {"brain"}


def test_the_tool_calls_of_one_turn_run_at_once():
    # Each call of `meet` waits for the other: one after the other, the
    # first would give up after 10 s and say so.
    model = Model([("meet", {}), ("meet", {})])
    cluster, _ = with_model(model, "py-meet", slots=1)
    try:
        result = weft.Client(cluster.url).submit(agent("meet")).wait(timeout=60)
        assert result.status == "completed", result.error
        assert result.state["answer"] == "met | met"
    finally:
        cluster.stop()
        model.server.shutdown()


def test_a_tool_whose_worker_dies_mid_call_is_an_error_for_the_model(tmp_path):
    marker = tmp_path / "napping"
    model = Model([("nap", {"marker": str(marker), "seconds": 60})])
    cluster, napper = with_model(model, "py-napper", slots=1)
    try:
        run = weft.Client(cluster.url).submit(agent("nap"))
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, cluster.log("py-napper")
            time.sleep(0.02)
        napper.kill()
        # Not left waiting for the step's whole time: told at once.
        result = run.wait(timeout=20)
        assert result.status == "completed", result.error
        assert result.state["answer"] == "error: no worker that hosts the tool is connected any more"
    finally:
        cluster.stop()
        model.server.shutdown()
