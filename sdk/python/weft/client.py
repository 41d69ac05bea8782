"""The client: submit graphs, follow runs, answer and act on them, over
the coordinator's gRPC API (`weft.v1.RunService`).

    client = weft.Client("http://127.0.0.1:7700")
    run = client.submit("examples/review-approval.yaml", input={"title": "x"})
    for event in run.events():
        print(event.type, event.fields)
    result = run.wait()
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import grpc

from . import errors
from .bundle import GraphBundle
from .events import event_from_wire
from .types import Delta, Event, History, RunInfo, checked_status, delta_from_wire, history_from_wire, place_request, run_from_wire
from .v1 import runs_pb2 as pb
from .v1 import runs_pb2_grpc as rpc

Graph = Union[str, "os.PathLike[str]", dict, GraphBundle]

# The largest message either side sends (a bundle, a state).
_MAX_MESSAGE = 256 << 20

# The event types that end or pause a run: all a wait asks the coordinator
# to send.
ENDS = ("run_finished", "waiting_for_input")


def channel(url: str, ca: Optional[Union[str, bytes]] = None) -> grpc.Channel:
    """A channel to `url` (`http://HOST:PORT`, or `https://` with `ca`, a
    PEM file's path or its bytes, or the system's roots without it)."""
    options = [
        ("grpc.max_receive_message_length", _MAX_MESSAGE),
        ("grpc.max_send_message_length", _MAX_MESSAGE),
    ]
    if url.startswith("https://"):
        roots = Path(ca).read_bytes() if isinstance(ca, str) else ca
        credentials = grpc.ssl_channel_credentials(root_certificates=roots)
        return grpc.secure_channel(url.removeprefix("https://"), credentials, options)
    if url.startswith("http://"):
        return grpc.insecure_channel(url.removeprefix("http://"), options)
    raise ValueError(f"coordinator URL '{url}' must start with http:// or https://")


def settings(url: Optional[str], token: Optional[str], ca: Optional[str]) -> tuple[str, Optional[str], Optional[str]]:
    """The arguments, or else `WEFT_COORDINATOR`, `WEFT_TOKEN`, `WEFT_CA`."""
    url = url or os.environ.get("WEFT_COORDINATOR") or "http://127.0.0.1:7700"
    token = token or os.environ.get("WEFT_TOKEN") or None
    ca = ca or os.environ.get("WEFT_CA") or None
    return url, token, ca


def bundle_of(graph: Graph) -> GraphBundle:
    """`graph` as a bundle: a file's path, a dict, or a bundle already."""
    if isinstance(graph, GraphBundle):
        return graph
    if isinstance(graph, dict):
        return GraphBundle.from_dict(graph)
    return GraphBundle.from_file(graph)


def bundle_to_wire(bundle: GraphBundle) -> pb.GraphBundle:
    return pb.GraphBundle(
        graph_path=bundle.graph_path,
        files=[pb.BundleFile(path=path, content=content, mode=mode) for path, content, mode in bundle.files],
    )


class Run:
    """A submitted run: its id, and what to do with it."""

    def __init__(self, client: "Client", run_id: str, warnings: Optional[list[str]] = None) -> None:
        self.client = client
        self.run_id = run_id
        self.warnings = warnings or []

    def __repr__(self) -> str:
        return f"Run({self.run_id!r})"

    def events(self, start: int = 0) -> Iterator[Event]:
        """The run's events from position `start`, as they happen; ends
        with the run (or where it waits for a person, once nothing else
        can happen until someone answers)."""
        return self.client.events(self.run_id, start)

    def stream(self, start: int = 0) -> Iterator[Delta]:
        """The model output of the run's `llm`, `agent` and `rag` steps as
        it is written, from offset `start`; ends with the run."""
        return self.client.stream(self.run_id, start)

    def history(self, at: Union[int, str, None] = None) -> History:
        """The places the run's history keeps, and its state at `at`: a
        wave (0: the input), or a point within the next wave (`"3.57"`, as
        `Wave.at` gives it); None: the last kept."""
        return self.client.history(self.run_id, at)

    def fork(self, at: Union[int, str, None] = None, set: Optional[dict[str, Any]] = None) -> "Run":
        """A new run from this one's state at place `at` of its history
        (a wave, or `"3.57"`), with the fields of `set` replaced (see
        `Client.fork`)."""
        return self.client.fork(self.run_id, at, set)

    def wait(self, timeout: Optional[float] = None) -> RunInfo:
        """The run once it has ended or waits for a person."""
        return self.client.wait(self.run_id, timeout)

    def get(self) -> RunInfo:
        """The run now."""
        return self.client.get(self.run_id)


def submit_request(
    graph: Graph, input: Optional[dict[str, Any]], priority: Optional[str], no_cache: bool
) -> pb.SubmitRequest:
    """The submission of `graph` with `input`, `priority` and `no_cache`
    (see `Client.submit`); a priority that is not one raises `ValueError`."""
    if priority is not None and priority not in ("high", "normal", "low"):
        raise ValueError(f"priority {priority!r} is not one of high, normal, low")
    return pb.SubmitRequest(
        bundle=bundle_to_wire(bundle_of(graph)),
        input_json=json.dumps(input or {}),
        priority=priority or "",
        no_cache=no_cache,
    )


class Client:
    """A connection to a coordinator: `url` (default `WEFT_COORDINATOR`, else
    `http://127.0.0.1:7700`), `token` (`WEFT_TOKEN`), `ca` (`WEFT_CA`: the
    PEM file that signs an `https://` coordinator's certificate)."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, ca: Optional[str] = None) -> None:
        self.url, token, ca = settings(url, token, ca)
        self._channel = channel(self.url, ca)
        self._stub = rpc.RunServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()

    def close(self) -> None:
        """Closes the connection."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, request: Any, graph: bool = False) -> Any:
        try:
            return getattr(self._stub, method)(request, metadata=self._metadata)
        except grpc.RpcError as error:
            raise errors.from_rpc(error, graph=graph) from None

    def submit(
        self,
        graph: Graph,
        input: Optional[dict[str, Any]] = None,
        priority: Optional[str] = None,
        no_cache: bool = False,
    ) -> Run:
        """Submits `graph` (a graph file's path, its directory bundled; a
        dict; or a `GraphBundle`) with `input`, and returns the run.
        `priority` (`high`, `normal` or `low`) places its steps in its
        namespace's queue, over the graph's `settings.priority`.
        `no_cache=True` runs every step: none takes or keeps a node cache
        entry (`weft run --no-cache`)."""
        request = submit_request(graph, input, priority, no_cache)
        response = self._call("Submit", request, graph=True)
        return Run(self, response.run_id, list(response.warnings))

    def validate(self, graph: Graph) -> list[str]:
        """What the coordinator finds wrong with `graph`, one line each
        (`error: …`, `warning: …`); empty when it is valid."""
        request = pb.ValidateRequest(bundle=bundle_to_wire(bundle_of(graph)))
        response = self._call("Validate", request, graph=True)
        return [f"{f.severity}: {f.message}" for f in response.findings]

    def run(self, run_id: str) -> Run:
        """A handle on the run `run_id`."""
        return Run(self, run_id)

    def get(self, run_id: str) -> RunInfo:
        """The run `run_id` with its state."""
        return run_from_wire(self._call("GetRun", pb.GetRunRequest(run_id=run_id)))

    def status(self, run_id: str) -> RunInfo:
        """The run without its state (`state` is None): cheap to poll."""
        return run_from_wire(self._call("GetRun", pb.GetRunRequest(run_id=run_id, omit_state=True)))

    def runs(self, status: Optional[str] = None, limit: int = 100) -> list[RunInfo]:
        """Runs, newest first, without their states: at most `limit`, with
        `status` (`running`, `waiting`, `completed`, `failed`, `cancelled`)
        when given."""
        checked_status(status)
        found: list[RunInfo] = []
        after = ""
        while len(found) < limit:
            page = self._call("ListRuns", pb.ListRunsRequest(limit=min(1000, max(limit, 100)), after=after))
            for info in page.runs:
                run = run_from_wire(info)
                if status is None or run.status == status:
                    found.append(run)
            if not page.next:
                break
            after = page.next
        return found[:limit]

    def events(self, run_id: str, start: int = 0) -> Iterator[Event]:
        """The events of run `run_id` from position `start` (see
        `Run.events`)."""
        try:
            for message in self._stub.WatchRun(pb.WatchRunRequest(run_id=run_id, **{"from": start}), metadata=self._metadata):
                event = event_from_wire(message)
                if event is not None:
                    yield event
        except grpc.RpcError as error:
            raise errors.from_rpc(error) from None

    def stream(self, run_id: str, start: int = 0) -> Iterator[Delta]:
        """The model output of run `run_id`'s steps from offset `start`
        (see `Run.stream`)."""
        request = pb.StreamRunRequest(run_id=run_id, **{"from": start})
        try:
            for message in self._stub.StreamRun(request, metadata=self._metadata):
                yield delta_from_wire(message)
        except grpc.RpcError as error:
            raise errors.from_rpc(error) from None

    def wait(self, run_id: str, timeout: Optional[float] = None) -> RunInfo:
        """Run `run_id` once it has ended or waits for a person; raises
        `TimeoutError` after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        start = 0
        while True:
            info = self.get(run_id)
            if info.done or info.status == "waiting":
                return info
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"run {run_id} is still {info.status} after {timeout} s")
            try:
                stream = self._stub.WatchRun(
                    # Only the events that end or pause a run are sent.
                    pb.WatchRunRequest(run_id=run_id, types=ENDS, **{"from": start}),
                    metadata=self._metadata,
                    timeout=remaining,
                )
                for message in stream:
                    start = message.seq + 1
                    kind = message.WhichOneof("event")
                    if kind in ("run_finished", "waiting_for_input"):
                        break
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise TimeoutError(f"run {run_id} did not end within {timeout} s") from None
                if error.code() != grpc.StatusCode.UNAVAILABLE:
                    raise errors.from_rpc(error) from None
                time.sleep(0.2)

    def resume(self, run_id: str, node: str, value: Any, comment: Optional[str] = None) -> RunInfo:
        """Answers the waiting node `node`: `"approve"` or `"reject"` for
        an approval, any JSON value for an input."""
        request = pb.ResumeRequest(run_id=run_id, node=node, value_json=json.dumps(value), comment=comment or "")
        return run_from_wire(self._call("Resume", request))

    def cancel(self, run_id: str) -> RunInfo:
        """Cancels a running or waiting run."""
        return run_from_wire(self._call("Cancel", pb.CancelRequest(run_id=run_id)))

    def retry(self, run_id: str) -> RunInfo:
        """Runs a failed run's failed wave again."""
        return run_from_wire(self._call("Retry", pb.RetryRequest(run_id=run_id)))

    def fork(
        self, run_id: str, at: Union[int, str, None] = None, set: Optional[dict[str, Any]] = None
    ) -> Run:
        """Starts a new run from run `run_id`'s state at place `at` of its
        history — after a wave (`3`), or at a point within the next one
        (`"3.57"`: a map's finished items and a loop's iterations kept) —
        (the last kept when None), with the fields of `set` replaced, on
        the same bundle; the original is untouched and the fork's
        `forked_from` names it. A subgraph node's child run is forked with
        its parent: the run returned is the parent's fork, whose node takes
        the child's fork on. A place not kept, or a field that does not fit
        the state, raises `InvalidArgument` naming it."""
        request = pb.ForkRequest(
            run_id=run_id,
            **place_request(at),
            set_json={name: json.dumps(value) for name, value in (set or {}).items()},
        )
        response = self._call("Fork", request)
        return Run(self, response.run_id, list(response.warnings))

    def history(self, run_id: str, at: Union[int, str, None] = None) -> History:
        """The places run `run_id`'s history keeps, and its state at `at`
        (see `Run.history`); a place not kept raises `InvalidArgument`
        naming those that are."""
        request = pb.GetHistoryRequest(run_id=run_id, **place_request(at))
        return history_from_wire(self._call("GetHistory", request))

    def delete(self, run_id: str) -> None:
        """Removes an ended run and its records."""
        self._call("DeleteRun", pb.DeleteRunRequest(run_id=run_id))
