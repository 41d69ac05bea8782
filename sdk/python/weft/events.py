"""A run's events, typed: one class per event type, each an `Event` (so
`event.type`, `event["node"]` and `event.get(...)` work on all of them)
with its fields as typed attributes, for `isinstance` and `match`:

    for event in run.events():
        match event:
            case weft.NodeFinished(node=node, worker=worker):
                print(f"{node} done on {worker}")
            case weft.MapItemFinished(done=done, total=total):
                print(f"{done}/{total}")
            case weft.RunFinished(status="failed", error=error):
                print(error.message)

Positional patterns take each class's own fields in order
(`case weft.NodeStarted(node, attempt):`). A type this client does not
know (a newer coordinator's) arrives as a plain `Event`.

The attributes are named as `weft watch --json` names the fields, except
`from`, a Python keyword, which is `from_` (`event["from"]` still works).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from .types import Event, ForkedFrom, RunError, Usage, run_error, usage_from_json


@dataclass(frozen=True)
class RetrievedHit:
    """One passage a `rag` step retrieved: its document's `source`, the
    `heading` it is under (empty: none) and its `score`."""

    source: str
    heading: str
    score: float


@dataclass(frozen=True)
class WaveStarted(Event):
    """Wave `step` began with these nodes."""

    __match_args__ = ("step", "nodes")
    step: int
    nodes: list[str]


@dataclass(frozen=True)
class NodeStarted(Event):
    """A step was sent to a worker: its `attempt` (1 for the first), and
    for a map's item its `item` index."""

    __match_args__ = ("node", "attempt", "item")
    node: str
    attempt: int
    item: Optional[int]


@dataclass(frozen=True)
class NodeFinished(Event):
    """A step succeeded, on `worker` (None when answered from the cache);
    `usage` is what its model calls used (None: none made)."""

    __match_args__ = ("node", "item", "worker", "usage")
    node: str
    item: Optional[int]
    worker: Optional[str]
    usage: Optional[Usage]


@dataclass(frozen=True)
class NodeRetrying(Event):
    """A step's attempt failed; attempt `next_attempt` starts after
    `delay_ms`."""

    __match_args__ = ("node", "next_attempt", "delay_ms", "error")
    node: str
    next_attempt: int
    delay_ms: int
    error: str


@dataclass(frozen=True)
class NodeFailed(Event):
    """A step failed for good; its `fallback` node takes over when it has
    one."""

    __match_args__ = ("node", "item", "error", "fallback")
    node: str
    item: Optional[int]
    error: str
    fallback: Optional[str]


@dataclass(frozen=True)
class NodeSkipped(Event):
    """A node will not run in this run (no edge reached it)."""

    __match_args__ = ("node",)
    node: str


@dataclass(frozen=True)
class StateChanged(Event):
    """Wave `step` merged: the `fields` it changed, the `values` small
    enough to show, and the size in bytes of the others (`folded`)."""

    __match_args__ = ("step", "fields_changed", "values", "folded")
    step: int
    fields_changed: list[str]
    values: dict[str, Any]
    folded: dict[str, int]


@dataclass(frozen=True)
class LoopReset(Event):
    """A loop edge went back from `from_` to `head`."""

    __match_args__ = ("from_", "head")
    from_: str
    head: str


@dataclass(frozen=True)
class MapItemFinished(Event):
    """Item `index` of map `node` finished: `done` of `total`."""

    __match_args__ = ("node", "index", "done", "total")
    node: str
    index: int
    done: int
    total: int


@dataclass(frozen=True)
class TaskUnhosted(Event):
    """No worker connected hosts what `node` `needs`: it waits for one."""

    __match_args__ = ("node", "needs")
    node: str
    needs: str


@dataclass(frozen=True)
class WaitingForInput(Event):
    """The run waits for a person to answer `node` (`kind`: `approval` or
    `input`)."""

    __match_args__ = ("node", "kind", "prompt")
    node: str
    kind: str
    prompt: str


@dataclass(frozen=True)
class InputReceived(Event):
    """`node` was answered, by `by`."""

    __match_args__ = ("node", "by")
    node: str
    by: str


@dataclass(frozen=True)
class RunFinished(Event):
    """The run ended: `completed`, `failed` or `cancelled`, and why."""

    __match_args__ = ("status", "error")
    status: str
    error: Optional[RunError]


@dataclass(frozen=True)
class LoopIteration(Event):
    """A `loop` node's iteration ended; `done` when the loop ends with it,
    and `reason` why."""

    __match_args__ = ("node", "iteration", "max_iterations", "done", "reason")
    node: str
    iteration: int
    max_iterations: int
    done: bool
    reason: str


@dataclass(frozen=True)
class SubgraphStarted(Event):
    """A subgraph node's child run started as `run_id`."""

    __match_args__ = ("node", "run_id")
    node: str
    run_id: str


@dataclass(frozen=True)
class MessageSent(Event):
    """A map item's step sent a teammate message from item `from_` to
    `to`."""

    __match_args__ = ("node", "from_", "to", "bytes", "content")
    node: str
    from_: str
    to: str
    bytes: int
    content: Any


@dataclass(frozen=True)
class ModelCalled(Event):
    """A step called a model: its tokens as the provider reported them
    (None: not reported), latency and cost (None: no price)."""

    __match_args__ = ("node", "item", "model")
    node: str
    item: Optional[int]
    model: str
    prompt_tokens: Optional[int]
    completion_tokens: Optional[int]
    latency_ms: int
    provider: Optional[str]
    cached_tokens: Optional[int]
    cost: Optional[float]


@dataclass(frozen=True)
class ToolCalled(Event):
    """An agent step called `tool`; `error` when the call failed."""

    __match_args__ = ("node", "item", "tool", "error")
    node: str
    item: Optional[int]
    tool: str
    error: Optional[str]
    latency_ms: int


@dataclass(frozen=True)
class RunSubmitted(Event):
    """The run was accepted from `by` into `namespace`; a fork's names
    where it was forked from."""

    __match_args__ = ("by", "namespace", "forked_from")
    by: str
    namespace: str
    forked_from: Optional[ForkedFrom]


@dataclass(frozen=True)
class RunRetried(Event):
    """`retry` started the failed wave again, asked by `by`."""

    __match_args__ = ("by",)
    by: str


@dataclass(frozen=True)
class CancelRequested(Event):
    """`by` asked for the run to be cancelled."""

    __match_args__ = ("by",)
    by: str


@dataclass(frozen=True)
class TaskRedispatched(Event):
    """A step in flight was sent again (`reason`: its worker was lost, the
    coordinator restarted, …)."""

    __match_args__ = ("node", "attempt", "item", "reason", "worker")
    node: str
    attempt: int
    item: Optional[int]
    reason: str
    worker: Optional[str]


@dataclass(frozen=True)
class Retrieved(Event):
    """A `rag` step retrieved `hits` from its `knowledge`."""

    __match_args__ = ("node", "item", "knowledge", "mode", "hits")
    node: str
    item: Optional[int]
    knowledge: list[str]
    mode: str
    hits: list[RetrievedHit]
    latency_ms: int


@dataclass(frozen=True)
class IndexBuilt(Event):
    """A knowledge base's index was built for a step."""

    __match_args__ = ("node", "item", "knowledge")
    node: str
    item: Optional[int]
    knowledge: str
    key: str
    files: int
    bytes: int
    chunks: int
    index_bytes: int
    embedding_calls: int
    latency_ms: int
    vector_search: Optional[str]


@dataclass(frozen=True)
class TaskThrottled(Event):
    """A step waits for `limit` (a rate limit or a concurrency key);
    `wait_ms` how long at least, when known."""

    __match_args__ = ("node", "item", "limit", "wait_ms")
    node: str
    item: Optional[int]
    limit: str
    wait_ms: Optional[int]


@dataclass(frozen=True)
class NodeCached(Event):
    """A step was answered from the node cache: kept by run `stored_by`,
    `age_ms` ago."""

    __match_args__ = ("node", "item", "stored_by", "age_ms")
    node: str
    item: Optional[int]
    stored_by: str
    age_ms: int


@dataclass(frozen=True)
class NodeNotCached(Event):
    """A step's answer was not kept in the node cache, and why."""

    __match_args__ = ("node", "item", "reason")
    node: str
    item: Optional[int]
    reason: str


# Each event type's class, by its `type`.
TYPES: dict[str, type[Event]] = {
    "wave_started": WaveStarted,
    "node_started": NodeStarted,
    "node_finished": NodeFinished,
    "node_retrying": NodeRetrying,
    "node_failed": NodeFailed,
    "node_skipped": NodeSkipped,
    "state_changed": StateChanged,
    "loop_reset": LoopReset,
    "map_item_finished": MapItemFinished,
    "task_unhosted": TaskUnhosted,
    "waiting_for_input": WaitingForInput,
    "input_received": InputReceived,
    "run_finished": RunFinished,
    "loop_iteration": LoopIteration,
    "subgraph_started": SubgraphStarted,
    "message_sent": MessageSent,
    "model_called": ModelCalled,
    "tool_called": ToolCalled,
    "run_submitted": RunSubmitted,
    "run_retried": RunRetried,
    "cancel_requested": CancelRequested,
    "task_redispatched": TaskRedispatched,
    "retrieved": Retrieved,
    "index_built": IndexBuilt,
    "task_throttled": TaskThrottled,
    "node_cached": NodeCached,
    "node_not_cached": NodeNotCached,
}

# Attributes whose JSON field is named otherwise.
_RENAMED = {"from_": "from", "fields_changed": "fields"}

_BASE = {f.name for f in dataclasses.fields(Event)}


def event_from_json(seq: int, at_unix_ms: int, body: dict[str, Any]) -> Event:
    """The client's form of an event whose JSON form (what `weft watch
    --json` prints, `type` included) is `body`: its type's class, with
    those fields (`fields`, without `type`) and typed; a plain `Event` for
    a type this client does not know."""
    kind = body.pop("type")
    fields = body
    typed: dict[str, Any] = {}
    if kind == "node_finished":
        typed["usage"] = usage_from_json(fields.get("usage"))
    if kind == "run_finished":
        typed["error"] = run_error(fields.get("error"))
    if kind == "run_submitted":
        forked = fields.get("forked_from")
        typed["forked_from"] = ForkedFrom(forked["run"], forked["step"], forked.get("point", 0)) if forked else None
    if kind == "retrieved":
        typed["hits"] = [RetrievedHit(h["source"], h.get("heading", ""), h["score"]) for h in fields.get("hits", [])]
    cls = TYPES.get(kind, Event)
    for attribute in dataclasses.fields(cls):
        name = attribute.name
        if name in _BASE or name in typed:
            continue
        typed[name] = fields.get(_RENAMED.get(name, name))
    return cls(seq=seq, at_unix_ms=at_unix_ms, type=kind, fields=fields, **typed)
