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
from .types import Answer, ChildRun, Delta, Event, ForkedFrom, History, RunError, RunInfo, Usage, WaitingNode, Wave
from .team import Message, Team, TeamError
from .worker import HandlerFailed, Item, TaskContext, ToolContext, Worker

__all__ = [
    "Answer",
    "BundleError",
    "ChildRun",
    "Client",
    "Delta",
    "Event",
    "GraphBundle",
    "ForkedFrom",
    "GraphInvalid",
    "History",
    "HandlerFailed",
    "InvalidArgument",
    "Message",
    "Item",
    "PermissionDenied",
    "Rejected",
    "Run",
    "RunError",
    "RunInfo",
    "RunNotFound",
    "TaskContext",
    "ToolContext",
    "Team",
    "TeamError",
    "TooLarge",
    "Unauthenticated",
    "Unavailable",
    "Usage",
    "WaitingNode",
    "Wave",
    "WeftError",
    "Worker",
]
