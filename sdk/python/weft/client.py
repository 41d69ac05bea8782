"""The client: submit graphs, follow runs, answer and act on them. Its
calls are Weft's Rust client's (`weft_client`, in `weft._native`): a
graph bundles the same bytes as from `weft run`, reads and waits ride out
a coordinator's restart as the command line's do, and each call lets the
interpreter go while it waits, so threads share one client.

    client = weft.Client("http://127.0.0.1:7700")
    run = client.submit("examples/review-approval.yaml", input={"title": "x"})
    for event in run.events():
        print(event.type, event.fields)
    result = run.wait()
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Optional, Union

from . import _native
from .bundle import GraphBundle
from .events import event_from_json
from .types import (
    Delta,
    Event,
    History,
    RunInfo,
    checked_status,
    delta_from_json,
    history_from_json,
    place,
    run_from_json,
)

Graph = Union[str, "os.PathLike[str]", dict, GraphBundle]

def settings(url: Optional[str], token: Optional[str], ca: Optional[str]) -> tuple[str, Optional[str], Optional[str]]:
    """The arguments, or else `WEFT_COORDINATOR`, `WEFT_TOKEN`, `WEFT_CA`."""
    url = url or os.environ.get("WEFT_COORDINATOR") or "http://127.0.0.1:7700"
    token = token or os.environ.get("WEFT_TOKEN") or None
    ca = ca or os.environ.get("WEFT_CA") or None
    return url, token, ca


def connect(url: str, token: Optional[str], ca: Optional[str]) -> _native.Client:
    """The native client of the coordinator at `url`; it connects on its
    first call. A URL that is not `http://` or `https://` raises
    `ValueError`."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"coordinator URL '{url}' must start with http:// or https://")
    return _native.Client(url, token, ca)


def bundle_of(graph: Graph) -> GraphBundle:
    """`graph` as a bundle: a file's path, a dict, or a bundle already."""
    if isinstance(graph, GraphBundle):
        return graph
    if isinstance(graph, dict):
        return GraphBundle.from_dict(graph)
    return GraphBundle.from_file(graph)


def graph_argument(graph: Graph) -> Union[str, tuple[str, list[tuple[str, bytes, int]]]]:
    """`graph` as the native client takes it: a file's path (bundled by
    the Rust bundler as the call is made), or a bundle's parts."""
    if isinstance(graph, (str, os.PathLike)):
        return os.fspath(graph)
    bundle = bundle_of(graph)
    return (bundle.graph_path, bundle.files)


def checked_priority(priority: Optional[str]) -> Optional[str]:
    """`priority` when it is one (or None); else ValueError."""
    if priority is not None and priority not in ("high", "normal", "low"):
        raise ValueError(f"priority {priority!r} is not one of high, normal, low")
    return priority


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
        with the run's `run_finished` (a run waiting for a person goes on
        once answered, so its feed goes on too)."""
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


class Client:
    """A connection to a coordinator: `url` (default `WEFT_COORDINATOR`, else
    `http://127.0.0.1:7700`), `token` (`WEFT_TOKEN`), `ca` (`WEFT_CA`: the
    PEM file that signs an `https://` coordinator's certificate)."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, ca: Optional[str] = None) -> None:
        self.url, token, ca = settings(url, token, ca)
        self._native = connect(self.url, token, ca)

    def close(self) -> None:
        """Closes the connection; later calls raise `WeftError`."""
        self._native.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

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
        run_id, warnings = self._native.submit(
            graph_argument(graph), input or {}, checked_priority(priority), no_cache
        )
        return Run(self, run_id, warnings)

    def validate(self, graph: Graph) -> list[str]:
        """What the coordinator finds wrong with `graph`, one line each
        (`error: …`, `warning: …`); empty when it is valid."""
        findings = self._native.validate(graph_argument(graph))
        return [f"{f['severity']}: {f['message']}" for f in findings]

    def run(self, run_id: str) -> Run:
        """A handle on the run `run_id`."""
        return Run(self, run_id)

    def get(self, run_id: str) -> RunInfo:
        """The run `run_id` with its state."""
        return run_from_json(self._native.get(run_id))

    def status(self, run_id: str) -> RunInfo:
        """The run without its state (`state` is None): cheap to poll."""
        return run_from_json(self._native.get(run_id, True))

    def runs(self, status: Optional[str] = None, limit: int = 100) -> list[RunInfo]:
        """Runs, newest first, without their states: at most `limit`, with
        `status` (`running`, `waiting`, `completed`, `failed`, `cancelled`)
        when given."""
        checked_status(status)
        found: list[RunInfo] = []
        after = None
        while len(found) < limit:
            page, after = self._native.list_page(min(1000, max(limit, 100)), after)
            found += [run for run in map(run_from_json, page) if status is None or run.status == status]
            if after is None:
                break
        return found[:limit]

    def events(self, run_id: str, start: int = 0) -> Iterator[Event]:
        """The events of run `run_id` from position `start` (see
        `Run.events`)."""
        feed = self._native.events(run_id, start)
        while (item := feed.next()) is not None:
            yield event_from_json(*item)

    def stream(self, run_id: str, start: int = 0) -> Iterator[Delta]:
        """The model output of run `run_id`'s steps from offset `start`
        (see `Run.stream`)."""
        feed = self._native.stream(run_id, start)
        while (item := feed.next()) is not None:
            yield delta_from_json(item)

    def wait(self, run_id: str, timeout: Optional[float] = None) -> RunInfo:
        """Run `run_id` once it has ended or waits for a person; raises
        `TimeoutError` after `timeout` seconds. A coordinator that goes
        away meanwhile (a restart, a failover) is waited for."""
        return run_from_json(self._native.wait(run_id, timeout))

    def resume(self, run_id: str, node: str, value: Any, comment: Optional[str] = None) -> RunInfo:
        """Answers the waiting node `node`: `"approve"` or `"reject"` for
        an approval, any JSON value for an input."""
        return run_from_json(self._native.resume(run_id, node, value, comment))

    def cancel(self, run_id: str) -> RunInfo:
        """Cancels a running or waiting run."""
        return run_from_json(self._native.cancel(run_id))

    def retry(self, run_id: str) -> RunInfo:
        """Runs a failed run's failed wave again."""
        return run_from_json(self._native.retry(run_id))

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
        fork_id, warnings = self._native.fork(run_id, place(at), set or {})
        return Run(self, fork_id, warnings)

    def history(self, run_id: str, at: Union[int, str, None] = None) -> History:
        """The places run `run_id`'s history keeps, and its state at `at`
        (see `Run.history`); a place not kept raises `InvalidArgument`
        naming those that are."""
        return history_from_json(self._native.history(run_id, place(at)))

    def delete(self, run_id: str) -> None:
        """Removes an ended run and its records."""
        self._native.delete(run_id)
