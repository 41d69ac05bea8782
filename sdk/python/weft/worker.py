"""A worker written in Python: it hosts `task` handlers and serves a
coordinator's tasks.

    worker = weft.Worker("http://127.0.0.1:7700", slots=4)

    @worker.handler("summarize")
    def summarize(state, ctx):
        return {"summary": state["text"][:100]}

    worker.run()        # until SIGTERM or SIGINT, then drains

A handler takes the state the node sees (a dict) and a `TaskContext`, and
returns the fields it writes (a dict). A tool (`@worker.tool`) takes the
arguments an `agent` step's model chose (a dict, checked against the tool's
schema first) and a `ToolContext`, and returns what the model reads (a
string, or any JSON value); the agent runs on a worker with a model
provider, and its calls of this tool reach this worker through the
coordinator. A plain function runs on a thread of the worker's pool; an
`async def` runs on the worker's event loop. An exception fails the
attempt with its traceback (the handler's frames), and the node's `retry`
policy takes it from there.

The worker itself is Weft's Rust worker (`weft._native`, the same code as
the `worker` binary): its connection, reconnection with backoff, the
per-run cache of state fields, batched results, heartbeats, teammates,
remote tools and drain. Python code runs only inside the calls of what
you register, the interpreter attached for just those.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import socket
import threading
import traceback
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from . import _native
from .team import Team

Handler = Callable[[dict[str, Any], "TaskContext"], Any]
Tool = Callable[[dict[str, Any], "ToolContext"], Any]


@dataclass(frozen=True)
class Item:
    """Which map item a step belongs to: the map node, the item's index,
    and the step's position in the item's chain."""

    map: str
    index: int
    step: int


@dataclass
class TaskContext:
    """What a handler knows of its attempt."""

    run_id: str
    node: str
    attempt: int
    #: The attempt's key within the run: the same for a retried delivery of
    #: the same attempt, so a handler with side effects can be idempotent.
    task_key: int
    #: The step's scope (a map item's binding), a dict.
    scope: dict[str, Any]
    item: Optional[Item] = None
    config: dict[str, Any] = field(default_factory=dict)
    #: For a `teammates: true` step of a map item: its team (`me`,
    #: `members`, `send`, `inbox`, `recv`); None otherwise.
    team: Optional[Team] = None


@dataclass
class ToolContext:
    """The agent step a tool is called for."""

    run_id: str
    #: The agent's node.
    node: str
    attempt: int
    #: The calling attempt's key (the same for every call of one attempt).
    task_key: int
    #: The step's scope (a map item's binding), a dict.
    scope: dict[str, Any]
    #: The map item's index, for a step of a map item's chain.
    item: Optional[int] = None


@dataclass(frozen=True)
class _ToolEntry:
    function: Tool
    description: str
    parameters: dict[str, Any]


class HandlerFailed(Exception):
    """Raise from a handler to fail the attempt with just this message (no
    traceback)."""


class Worker:
    """A worker for the coordinator at `url` (default `WEFT_COORDINATOR`, else
    `http://127.0.0.1:7700`), joining with `token` (default
    `WEFT_WORKER_TOKEN`), trusting `ca` for `https://` (default `WEFT_CA`),
    running `slots` tasks at once."""

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        ca: Optional[str] = None,
        slots: int = 4,
        name: Optional[str] = None,
        labels: Optional[dict[str, str]] = None,
    ) -> None:
        self.url = url or os.environ.get("WEFT_COORDINATOR") or "http://127.0.0.1:7700"
        self._token = token or os.environ.get("WEFT_WORKER_TOKEN") or None
        self._ca = ca or os.environ.get("WEFT_CA") or None
        self.slots = max(1, slots)
        self.name = name or f"{socket.gethostname()}-py-{os.getpid()}"
        self.labels = dict(labels or {})
        self._handlers: dict[str, Handler] = {}
        self._functions: dict[str, Callable[..., Any]] = {}
        self._tools: dict[str, _ToolEntry] = {}
        self._lock = threading.Lock()
        self._stopping = False
        self._running: Optional[Any] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def handler(self, name: str) -> Callable[[Handler], Handler]:
        """Registers the decorated function as the `task` handler `name`."""

        def register(function: Handler) -> Handler:
            self._handlers[name] = function
            return function

        return register

    def tool(self, name: str, schema: Optional[dict[str, Any]] = None,
             description: Optional[str] = None) -> Callable[[Tool], Tool]:
        """Registers the decorated function as the agent tool `name`:
        `schema` (a JSON Schema of its arguments, an object; default: any
        object) and `description` (default: the function's docstring) are
        what the model is told, unless the graph's `tools:` declares the tool
        with its own. It is called `(arguments, ctx)` on the handler pool
        (an `async def` on the event loop); an exception goes back to the
        model as the tool's error, never failing the step."""
        parameters = dict(schema) if schema is not None else {"type": "object"}
        if parameters.get("type", "object") != "object":
            raise ValueError(f"tool '{name}': the schema must describe an object of arguments")

        def register(function: Tool) -> Tool:
            text = description if description is not None else inspect.getdoc(function) or ""
            self._tools[name] = _ToolEntry(function, text, parameters)
            return function

        return register

    def function(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Registers the decorated function as `fn:NAME` for graphs: a
        reducer (called with the value before the wave and the list of its
        writes), a predicate or a router. It runs on the handler pool and
        returns a JSON value; an exception is the call's error."""

        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            self._functions[name] = function
            return function

        return register

    def stop(self) -> None:
        """Asks the worker to drain: it takes no more tasks, finishes those
        it runs, and leaves. Safe from any thread or a signal handler."""
        with self._lock:
            self._stopping = True
            running = self._running
        if running is not None:
            running.stop()

    def run(self) -> None:
        """Serves until `stop()`, SIGTERM or SIGINT, reconnecting when the
        coordinator goes away; then drains. Raises `Unauthenticated` or
        `PermissionDenied` when the coordinator refuses the worker."""
        native = _native.Worker(self.url, self.name, self.slots, sorted(self.labels.items()),
                                self._token, self._ca)
        for name, handler in self._handlers.items():
            native.handler(name, handler, self._submitter(handler))
        for name, tool in self._tools.items():
            native.tool(name, tool.description, tool.parameters, tool.function, self._submitter(tool.function))
        for name, function in self._functions.items():
            native.function(name, function)
        with self._lock:
            if self._stopping:
                return
            self._running = native
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGTERM, signal.SIGINT):
                signal.signal(number, lambda *_: self.stop())
        try:
            native.run()
        finally:
            with self._lock:
                self._running = None
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._loop = None

    def _submitter(self, function: Callable[..., Any]) -> Optional[Callable[[Any], Future]]:
        """How an `async def`'s coroutines reach the event loop (None for a
        plain function)."""
        if not inspect.iscoroutinefunction(function):
            return None
        return lambda coroutine: asyncio.run_coroutine_threadsafe(coroutine, self._event_loop())

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The loop `async` handlers run on, started on first use."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="weft-async", daemon=True).start()
                self._loop = loop
            return self._loop


def _machinery(filename: str) -> bool:
    """A frame of what runs between the worker and a handler (the event
    loop, a future's `result`), left out of the traceback it reports."""
    path = filename.replace(os.sep, "/")
    return "/concurrent/futures/" in path or "/asyncio/" in path


def _failure(exception: BaseException, role: str) -> str:
    """What a failed call reports (called by the native worker): a
    `HandlerFailed`'s message; for a handler, the traceback of its own
    frames; for a tool or a function, the exception's type and message."""
    if isinstance(exception, HandlerFailed):
        return str(exception)
    if role != "handler":
        return f"{type(exception).__name__}: {exception}"
    frames = [frame for frame in traceback.extract_tb(exception.__traceback__) if not _machinery(frame.filename)]
    text = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(exception))
    return "Traceback (most recent call last):\n" + text


def _joined(name: str) -> None:
    """Told by the native worker each time it joins a coordinator."""
    print(f"weft worker {name}: joined the coordinator", flush=True)
