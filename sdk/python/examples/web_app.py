"""A small web app that runs Weft graphs for its users: what a FastAPI or
Flask app would do, with the standard library only.

    POST /runs          body: {"graph": {...} or "path/to/graph.yaml", "input": {...}}
                        answers {"run_id": "..."} as soon as the run is accepted
    GET  /runs/ID/events
                        the run's events as server-sent events, until it
                        ends or waits for a person

    WEFT_COORDINATOR=http://127.0.0.1:7700 python web_app.py 8080
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import weft

client = weft.Client()  # WEFT_COORDINATOR, WEFT_TOKEN, WEFT_CA


class App(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        if self.path != "/runs":
            return self.send_error(404)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        try:
            run = client.submit(body["graph"], input=body.get("input"))
        except weft.GraphInvalid as error:
            return self.answer(400, {"error": error.message, "findings": error.findings})
        except weft.WeftError as error:
            return self.answer(502, {"error": error.message})
        self.answer(202, {"run_id": run.run_id})

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if len(parts) != 3 or parts[0] != "runs" or parts[2] != "events":
            return self.send_error(404)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        try:
            for event in client.run(parts[1]).events():
                data = json.dumps({"type": event.type, **event.fields})
                self.wfile.write(f"id: {event.seq}\ndata: {data}\n\n".encode())
                self.wfile.flush()
                if event.ends_or_pauses:
                    break
        except weft.RunNotFound as error:
            self.wfile.write(f"event: error\ndata: {json.dumps({'error': error.message})}\n\n".encode())

    def answer(self, status: int, body: dict) -> None:
        text = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, *_: object) -> None:
        pass


def serve(port: int) -> ThreadingHTTPServer:
    """The app on `port` (0: any free port)."""
    return ThreadingHTTPServer(("127.0.0.1", port), App)


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8080).serve_forever()
