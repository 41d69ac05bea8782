"""What the client returns: runs, their history and their events, as plain
dataclasses (each event type's own class is in `events`).

No generated protobuf type appears in what they hold; `types` and
`events` are the places that read them (`run_from_wire`,
`event_from_wire`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional, Union


from .v1 import runs_pb2 as pb

STATUSES = {
    pb.RUN_STATUS_RUNNING: "running",
    pb.RUN_STATUS_WAITING: "waiting",
    pb.RUN_STATUS_COMPLETED: "completed",
    pb.RUN_STATUS_FAILED: "failed",
    pb.RUN_STATUS_CANCELLED: "cancelled",
}


def checked_status(status: Optional[str]) -> Optional[str]:
    """`status` when it names a run status (or is None); else ValueError."""
    if status is not None and status not in STATUSES.values():
        raise ValueError(f"unknown status '{status}': one of {', '.join(STATUSES.values())}")
    return status


@dataclass(frozen=True)
class RunError:
    """How a failed or cancelled run ended."""

    kind: str
    node: str
    message: str


@dataclass(frozen=True)
class WaitingNode:
    """A node waiting for a person: `kind` is `approval` or `input`."""

    node: str
    kind: str
    prompt: str


@dataclass(frozen=True)
class Answer:
    """Who answered a human node; `approved` is None for an input."""

    node: str
    by: str
    approved: Optional[bool] = None


@dataclass(frozen=True)
class ChildRun:
    """A subgraph node's child run."""

    node: str
    run_id: str


@dataclass(frozen=True)
class Usage:
    """What model calls used: how many, their tokens as the providers
    reported them, and their cost by the coordinator's `[prices]` (None
    when no model called has a price)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: Optional[float] = None


@dataclass(frozen=True)
class RunInfo:
    """A run: its status, state (None when it was left out), error and
    pending questions, as `weft status --json` shows them."""

    run_id: str
    graph: str
    status: str
    state: Optional[dict[str, Any]]
    error: Optional[RunError] = None
    waiting: list[WaitingNode] = field(default_factory=list)
    children: list[ChildRun] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    namespace: str = ""
    submitted_by: str = ""
    forked_from: Optional["ForkedFrom"] = None
    event_count: int = 0
    created_unix_ms: int = 0
    ended_unix_ms: Optional[int] = None
    trace_id: str = ""
    usage: Usage = field(default_factory=Usage)

    @property
    def done(self) -> bool:
        """Whether the run has ended (completed, failed or cancelled)."""
        return self.status in ("completed", "failed", "cancelled")


@dataclass(frozen=True)
class Event:
    """One entry of a run's event log: `type` as `weft watch --json` names
    it (`wave_started`, `node_finished`, `run_finished`, …) and its fields
    as that JSON form has them (`node`, `item`, `step`, …)."""

    seq: int
    at_unix_ms: int
    type: str
    fields: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]

    def get(self, key: str, default: Any = None) -> Any:
        """A field, or `default`."""
        return self.fields.get(key, default)

    @property
    def ends_or_pauses(self) -> bool:
        """Whether the run ends or waits for a person here."""
        return self.type in ("run_finished", "waiting_for_input")


def run_from_wire(info: pb.RunInfo) -> RunInfo:
    """The client's form of a `RunInfo` message."""
    error = None
    if info.HasField("error") and (info.error.kind or info.error.message):
        error = RunError(info.error.kind, info.error.node, info.error.message)
    return RunInfo(
        run_id=info.run_id,
        graph=info.graph_name,
        status=STATUSES.get(info.status, "running"),
        state=json.loads(info.state_json) if info.state_json else None,
        error=error,
        waiting=[WaitingNode(w.node, w.kind, w.prompt) for w in info.waiting],
        children=[ChildRun(c.node, c.run_id) for c in info.children],
        answers=[
            Answer(a.node, a.by, a.approved if a.HasField("approved") else None)
            for a in info.answers
        ],
        namespace=info.namespace,
        submitted_by=info.submitted_by,
        forked_from=(
            ForkedFrom(info.forked_from_run, info.forked_from_step, info.forked_from_point)
            if info.forked_from_run
            else None
        ),
        event_count=info.event_count,
        created_unix_ms=info.created_unix_ms,
        ended_unix_ms=info.ended_unix_ms if info.HasField("ended_unix_ms") else None,
        trace_id=info.trace_id,
        usage=usage_from_wire(info.usage) if info.HasField("usage") else Usage(),
    )


def usage_from_wire(usage: pb.Usage) -> Usage:
    """The client's form of a `Usage` message."""
    return Usage(
        calls=usage.calls,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
        cost=usage.cost if usage.HasField("cost") else None,
    )


def _place(step: int, point: int) -> str:
    return f"{step}.{point}" if point else str(step)


def place_request(at: Union[int, str, None]) -> dict[str, int]:
    """The request fields of a place in a run's history: a wave's number
    (`3`), or text naming a wave or a point within the next one (`"3"`,
    `"3.57"`, as `Wave.at` gives it); None: the last kept."""
    if at is None:
        return {}
    if isinstance(at, bool) or not isinstance(at, (int, str)):
        raise TypeError(f"at: expected a wave (3) or a point within the next wave ('3.57'), got {at!r}")
    if isinstance(at, int):
        if at < 0:
            raise ValueError(f"at: a wave is not negative, got {at}")
        return {"at": at}
    step, _, point = at.strip().partition(".")
    if not step.isdigit() or (point and not point.isdigit()) or (_ and not point):
        raise ValueError(
            f"'{at}' is not a place in a run's history: expected a wave (3) "
            "or a point within the next wave (3.57)"
        )
    return {"at": int(step), "point": int(point or 0)}


@dataclass(frozen=True)
class ForkedFrom:
    """Where a forked run came from: the run, and the place in its history
    its state was taken at — after wave `step`, or at `point` within the
    next wave (0: right after it)."""

    run: str
    step: int
    point: int = 0

    @property
    def at(self) -> str:
        """The place as text: `2`, or `2.57` for a point within wave 3."""
        return _place(self.step, self.point)


@dataclass(frozen=True)
class Wave:
    """One place a run's history keeps: `step` is the waves merged (0: the
    input, before any); `point` is 0 right after that wave, else the
    events the run's log held at a checkpoint taken while the next wave was
    at work (a map's items finished, a loop's iterations, a subgraph's
    child started, a person asked); `status` the run's then, `changed` and
    `removed` the fields changed and removed since the place before."""

    step: int
    at_unix_ms: int
    status: str
    changed: list[str]
    removed: list[str]
    point: int = 0

    @property
    def at(self) -> str:
        """The place as text, as `history(at=...)` and `fork(at=...)` take
        it: `3`, or `3.57`."""
        return _place(self.step, self.point)


@dataclass(frozen=True)
class History:
    """A run's history: every place it keeps (`waves`), and its whole state
    at `step` (and `point` within the next wave; 0: right after `step`)."""

    waves: list[Wave]
    step: int
    state: dict[str, Any]
    point: int = 0

    @property
    def at(self) -> str:
        """The place `state` is at, as text."""
        return _place(self.step, self.point)


def history_from_wire(history: pb.RunHistory) -> History:
    """The client's form of a `RunHistory`."""
    return History(
        waves=[
            Wave(
                step=w.step,
                at_unix_ms=w.at_unix_ms,
                status=w.status,
                changed=list(w.changed),
                removed=list(w.removed),
                point=w.point,
            )
            for w in history.waves
        ],
        step=history.step,
        state=json.loads(history.state_json or "{}"),
        point=history.point,
    )


@dataclass(frozen=True)
class Delta:
    """A piece of a run's model output as its steps stream it: `kind` is
    `text` (of a reply), `tool_call` (`text` names the tool), `tool_result`
    (`NAME: RESULT`), `message` (a teammate message sent), `end` (the
    attempt's text is whole), `abandoned` (the attempt failed or was
    cancelled; a retry streams afresh under its own `attempt`) or
    `truncated`. `offset` is its place in the run's stream: streaming again
    from `offset + 1` goes on after it, with nothing lost or repeated."""

    offset: int
    node: str
    item: Optional[int]
    attempt: int
    kind: str
    text: str


def delta_from_wire(delta: pb.StreamDelta) -> Delta:
    """The client's form of a `StreamDelta`."""
    return Delta(
        offset=delta.offset,
        node=delta.node,
        item=delta.item if delta.HasField("item") else None,
        attempt=delta.attempt,
        kind=delta.kind,
        text=delta.text,
    )


def event_from_wire(event: pb.RunEvent) -> Optional[Event]:
    """The client's form of a `RunEvent`, typed (see `weft.events`, where
    it lives; kept here too for code that imported it from here)."""
    from .events import event_from_wire as typed

    return typed(event)
