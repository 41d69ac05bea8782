"""The examples in sdk/python/examples, run for real: the worker with two
handlers as a process, the web app on a thread, a graph submitted over
HTTP and its events streamed back."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import weft

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

GRAPH = {
    "name": "article",
    "state": {"title": {"type": "string"}, "text": {"type": "string"},
              "slug": {"type": "string", "default": ""}, "words": {"type": "integer", "default": 0}},
    "nodes": {
        "slug": {"kind": "task", "handler": "slugify", "start": True, "next": "count"},
        "count": {"kind": "task", "handler": "count_words", "end": True},
    },
}


def test_the_web_app_submits_and_streams_while_the_example_worker_serves(cluster, monkeypatch):
    monkeypatch.setenv("WEFT_COORDINATOR", cluster.url)
    worker = cluster.spawn("example-worker", [sys.executable, str(EXAMPLES / "worker.py")],
                           env={"WEFT_COORDINATOR": cluster.url}, stdout=subprocess.PIPE)
    assert "joined the coordinator" in worker.stdout.readline().decode()
    spec = importlib.util.spec_from_file_location("web_app", EXAMPLES / "web_app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    server = app.serve(0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        body = json.dumps({"graph": GRAPH, "input": {"title": "Hello, Weft!", "text": "one two three"}}).encode()
        request = urllib.request.Request(f"{base}/runs", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 202
            run_id = json.load(response)["run_id"]
        with urllib.request.urlopen(f"{base}/runs/{run_id}/events", timeout=60) as stream:
            kinds = [json.loads(line[6:])["type"] for line in stream.read().decode().splitlines()
                     if line.startswith("data: ")]
        assert kinds[0] == "run_submitted" and kinds[-1] == "run_finished", kinds
        state = weft.Client(cluster.url).get(run_id).state
        assert state["slug"] == "hello-weft" and state["words"] == 3
        bad = urllib.request.Request(f"{base}/runs", data=json.dumps({"graph": {"nodes": {}}}).encode(),
                                     method="POST")
        try:
            urllib.request.urlopen(bad, timeout=30)
            raise AssertionError("an invalid graph was accepted")
        except urllib.error.HTTPError as error:
            assert error.code == 400
            assert json.load(error)["findings"], "the findings travel back"
    finally:
        server.shutdown()
        worker.terminate()
        worker.wait(timeout=30)
