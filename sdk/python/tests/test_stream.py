"""`Run.stream()`: a step's model output through a real coordinator and
worker, from a local endpoint that streams its reply a word at a time."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

import weft
from conftest import Cluster

KEY = "sk-stream-py"
WORDS = ["The ", "tide ", "turns ", "twice ", "a ", "day."]


class Streaming:
    """A chat endpoint that streams `WORDS`, `gap` seconds apart."""

    def __init__(self, gap: float) -> None:
        class Endpoint(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                assert body.get("stream") is True
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for word in WORDS:
                    chunk = {"model": "tiny", "choices": [{"index": 0, "delta": {"content": word}}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(gap)
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture(scope="module")
def streaming() -> Iterator[Cluster]:
    endpoint = Streaming(gap=0.1)
    cluster = Cluster()
    cluster.add_worker("model", slots=2, env={"OPENAI_BASE_URL": endpoint.url, "OPENAI_API_KEY": KEY,
                                              "WEFT_MODEL": "tiny"})
    yield cluster
    cluster.stop()
    endpoint.server.shutdown()


TELL = {
    "name": "tell",
    "state": {"story": {"type": "string", "default": ""}},
    "nodes": {"tell": {"kind": "llm", "start": True, "end": True, "prompt": "Tell.",
                       "state_updates": {"story": "{{ output }}"}}},
}


def test_a_steps_text_streams_in_order_and_resumes_from_an_offset(streaming):
    client = weft.Client(streaming.url)
    run = client.submit(TELL)
    pieces = run.stream()
    first = next(pieces)
    assert (first.node, first.item, first.attempt, first.kind, first.offset) == ("tell", None, 1, "text", 0)
    assert client.get(run.run_id).status == "running"
    rest = list(weft.Client(streaming.url).stream(run.run_id, first.offset + 1))
    text = first.text + "".join(p.text for p in rest if p.kind == "text")
    assert text == "".join(WORDS)
    assert rest[-1].kind == "end"
    assert [p.offset for p in rest] == list(range(1, len(rest) + 1))
    assert run.wait(timeout=30).state["story"] == "".join(WORDS)


def test_the_async_client_streams_too(streaming):
    async def scenario() -> list[weft.Delta]:
        async with weft.aio.Client(streaming.url) as client:
            run = await client.submit(TELL)
            return [delta async for delta in run.stream()]

    pieces = asyncio.run(scenario())
    assert "".join(p.text for p in pieces if p.kind == "text") == "".join(WORDS)
    assert pieces[-1].kind == "end"
