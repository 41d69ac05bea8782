"""Weft's Python client: submit workflow graphs to a Weft cluster, follow
their events, answer their questions.

    import weft
    client = weft.Client("http://127.0.0.1:7700", token=None)
    run = client.submit("graph.yaml", input={"topic": "tokio"})
    print(run.wait().state)

`weft.Client` reads `WEFT_COORDINATOR`, `WEFT_TOKEN` and `WEFT_CA` when
its arguments are left out. Errors are the exceptions of `weft.errors`,
all `WeftError`s.
"""

from . import aio
from .bundle import BundleError, GraphBundle
from .client import Client, Run
from .errors import (
    GraphInvalid,
    InvalidArgument,
    PermissionDenied,
    Rejected,
    RunNotFound,
    TooLarge,
    Unauthenticated,
    Unavailable,
    WeftError,
)
from .events import (
    CancelRequested,
    IndexBuilt,
    InputReceived,
    LoopIteration,
    LoopReset,
    MapItemFinished,
    MessageSent,
    ModelCalled,
    NodeCached,
    NodeFailed,
    NodeFinished,
    NodeNotCached,
    NodeRetrying,
    NodeSkipped,
    NodeStarted,
    Retrieved,
    RetrievedHit,
    RunFinished,
    RunRetried,
    RunSubmitted,
    StateChanged,
    SubgraphStarted,
    TaskRedispatched,
    TaskThrottled,
    TaskUnhosted,
    ToolCalled,
    WaitingForInput,
    WaveStarted,
)
from .types import Answer, ChildRun, Delta, Event, ForkedFrom, History, RunError, RunInfo, Usage, WaitingNode, Wave
from .team import Message, Team, TeamError
from .worker import HandlerFailed, Item, TaskContext, ToolContext, Worker

__all__ = [
    "Answer",
    "BundleError",
    "CancelRequested",
    "ChildRun",
    "Client",
    "Delta",
    "Event",
    "ForkedFrom",
    "GraphBundle",
    "GraphInvalid",
    "HandlerFailed",
    "History",
    "IndexBuilt",
    "InputReceived",
    "InvalidArgument",
    "Item",
    "LoopIteration",
    "LoopReset",
    "MapItemFinished",
    "Message",
    "MessageSent",
    "ModelCalled",
    "NodeCached",
    "NodeFailed",
    "NodeFinished",
    "NodeNotCached",
    "NodeRetrying",
    "NodeSkipped",
    "NodeStarted",
    "PermissionDenied",
    "Rejected",
    "Retrieved",
    "RetrievedHit",
    "Run",
    "RunError",
    "RunFinished",
    "RunInfo",
    "RunNotFound",
    "RunRetried",
    "RunSubmitted",
    "StateChanged",
    "SubgraphStarted",
    "TaskContext",
    "TaskRedispatched",
    "TaskThrottled",
    "TaskUnhosted",
    "Team",
    "TeamError",
    "TooLarge",
    "ToolCalled",
    "ToolContext",
    "Unauthenticated",
    "Unavailable",
    "Usage",
    "WaitingForInput",
    "WaitingNode",
    "Wave",
    "WaveStarted",
    "WeftError",
    "Worker",
]
