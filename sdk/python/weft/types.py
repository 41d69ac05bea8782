"""What the client returns: runs, their history and their events, as plain
dataclasses (each event type's own class is in `events`).

The native core (`weft._native`) hands each over as the JSON form the
`weft` command line prints; `types` and `events` are the places that read
it (`run_from_json`, `event_from_json`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

# A run's statuses, as the coordinator names them.
STATUSES = ("running", "waiting", "completed", "failed", "cancelled")


def checked_status(status: Optional[str]) -> Optional[str]:
    """`status` when it names a run status (or is None); else ValueError."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"unknown status '{status}': one of {', '.join(STATUSES)}")
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
class UnhostedWait:
    """Tasks of `node` waiting for a worker that hosts what they `needs`
    (`handler 'summarize'`, …): `tasks` of them."""

    node: str
    needs: str
    tasks: int


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
    unhosted: list[UnhostedWait] = field(default_factory=list)

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


def run_from_json(run: dict[str, Any]) -> RunInfo:
    """The client's form of a run as the native core hands it over."""
    error = run.get("error")
    forked = run.get("forked_from")
    return RunInfo(
        run_id=run["run_id"],
        graph=run["graph"],
        status=run["status"],
        state=run["state"],
        error=run_error(error),
        waiting=[WaitingNode(w["node"], w["kind"], w["prompt"]) for w in run["waiting"]],
        children=[ChildRun(c["node"], c["run_id"]) for c in run["children"]],
        answers=[Answer(a["node"], a["by"], a.get("approved")) for a in run["answers"]],
        namespace=run["namespace"],
        submitted_by=run["submitted_by"],
        forked_from=ForkedFrom(forked["run"], forked["step"], forked.get("point", 0)) if forked else None,
        event_count=run["event_count"],
        created_unix_ms=run["created_unix_ms"],
        ended_unix_ms=run["ended_unix_ms"],
        trace_id=run["trace_id"],
        usage=usage_from_json(run["usage"]) or Usage(),
        unhosted=[UnhostedWait(u["node"], u["needs"], u["tasks"]) for u in run["unhosted"]],
    )


def run_error(error: Optional[dict[str, Any]]) -> Optional[RunError]:
    """How a run ended, from its JSON form (None: it did not fail)."""
    if not error or not (error.get("kind") or error.get("message")):
        return None
    return RunError(error["kind"], error["node"], error["message"])


def usage_from_json(usage: Optional[dict[str, Any]]) -> Optional[Usage]:
    """The client's form of a usage's JSON form (None for none)."""
    if usage is None:
        return None
    return Usage(
        calls=usage["calls"],
        prompt_tokens=usage["prompt_tokens"],
        completion_tokens=usage["completion_tokens"],
        cached_tokens=usage["cached_tokens"],
        cost=usage.get("cost"),
    )


def _place(step: int, point: int) -> str:
    return f"{step}.{point}" if point else str(step)


def place(at: Union[int, str, None]) -> Optional[tuple[int, int]]:
    """A place in a run's history as `(step, point)`: from a wave's number
    (`3`), or text naming a wave or a point within the next one (`"3"`,
    `"3.57"`, as `Wave.at` gives it); None: the last kept."""
    if at is None:
        return None
    if isinstance(at, bool) or not isinstance(at, (int, str)):
        raise TypeError(f"at: expected a wave (3) or a point within the next wave ('3.57'), got {at!r}")
    if isinstance(at, int):
        if at < 0:
            raise ValueError(f"at: a wave is not negative, got {at}")
        return (at, 0)
    step, _, point = at.strip().partition(".")
    if not step.isdigit() or (point and not point.isdigit()) or (_ and not point):
        raise ValueError(
            f"'{at}' is not a place in a run's history: expected a wave (3) "
            "or a point within the next wave (3.57)"
        )
    return (int(step), int(point or 0))


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


def history_from_json(history: dict[str, Any]) -> History:
    """The client's form of a run's history as the native core hands it
    over."""
    return History(
        waves=[
            Wave(
                step=w["step"],
                at_unix_ms=w["at_unix_ms"],
                status=w["status"],
                changed=w["changed"],
                removed=w["removed"],
                point=w["point"],
            )
            for w in history["waves"]
        ],
        step=history["step"],
        state=history["state"],
        point=history["point"],
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


def delta_from_json(delta: dict[str, Any]) -> Delta:
    """The client's form of a piece of model output as the native core
    hands it over."""
    return Delta(
        offset=delta["offset"],
        node=delta["node"],
        item=delta["item"],
        attempt=delta["attempt"],
        kind=delta["kind"],
        text=delta["text"],
    )
