"""A worker written in Python: it hosts `task` handlers and serves a
coordinator's tasks over the worker protocol (`weft.v1.WorkerService`).

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
coordinator. A plain function runs on a thread
of a pool of `slots` threads; an `async def` runs on the worker's event
loop. An exception fails the attempt with its traceback (the handler's
frames), and the node's `retry` policy takes it from there.

The worker keeps, per run, the latest version of each state field the
coordinator sent it, as the protocol asks: a task then carries only the
values the worker does not hold.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import queue
import signal
import socket
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import grpc

from . import errors
from .client import channel
from .team import Acks, Message, Team
from .v1 import workers_pb2 as pb
from .v1 import workers_pb2_grpc as rpc

PROTOCOL_VERSION = 1

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


@dataclass
class _Running:
    future: Optional[Future] = None
    cancelled: bool = False
    team: Optional[Team] = None


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
        token = token or os.environ.get("WEFT_WORKER_TOKEN") or None
        self._ca = ca or os.environ.get("WEFT_CA") or None
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.slots = max(1, slots)
        self.name = name or f"{socket.gethostname()}-py-{os.getpid()}"
        self.labels = dict(labels or {})
        self._handlers: dict[str, Handler] = {}
        self._functions: dict[str, Callable[..., Any]] = {}
        self._tools: dict[str, _ToolEntry] = {}
        self._stopping = threading.Event()
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
        self._stopping.set()

    def run(self) -> None:
        """Serves until `stop()`, SIGTERM or SIGINT, reconnecting when the
        coordinator goes away; then drains."""
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGTERM, signal.SIGINT):
                signal.signal(number, lambda *_: self.stop())
        with ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="weft-handler") as pool:
            self._pool = pool
            delay = 0.2
            while not self._stopping.is_set():
                try:
                    _Session(self).serve()
                    delay = 0.2
                except errors.Unauthenticated:
                    raise
                except errors.PermissionDenied:
                    raise
                except errors.WeftError as error:
                    print(f"weft worker {self.name}: {error.message}; connecting again", flush=True)
                if self._stopping.wait(delay):
                    break
                delay = min(delay * 2, 5.0)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The loop `async` handlers run on, started on first use."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="weft-async", daemon=True).start()
            self._loop = loop
        return self._loop


class _Session:
    """One joined stream to a coordinator."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.outgoing: "queue.Queue[Optional[pb.WorkerMessage]]" = queue.Queue()
        self.heartbeat = 2.0
        # How many results one message may carry (the welcome says).
        self.max_batch = 1
        self.running: dict[tuple[str, int], _Running] = {}
        self.lock = threading.Lock()
        self.fields: dict[str, dict[str, tuple[int, Any]]] = {}
        self.draining = False
        self.acks = Acks()

    def hello(self) -> pb.WorkerMessage:
        worker = self.worker
        return pb.WorkerMessage(hello=pb.Hello(
            protocol_version=PROTOCOL_VERSION,
            name=worker.name,
            slots=worker.slots,
            labels=worker.labels,
            handlers=sorted(worker._handlers),
            functions=sorted(worker._functions),
            tools=sorted(worker._tools),
            tool_infos=[
                pb.ToolInfo(name=name, description=tool.description, parameters_json=json.dumps(tool.parameters))
                for name, tool in sorted(worker._tools.items())
            ],
            takes_batches=True,
        ))

    def requests(self) -> Iterator[pb.WorkerMessage]:
        """The worker's side of the stream: the hello, then what is queued,
        with a heartbeat whenever nothing else went for an interval. Results
        queued together go as one batch, as many as the welcome allows."""
        yield self.hello()
        held: Optional[pb.WorkerMessage] = None
        while True:
            if held is not None:
                message, held = held, None
            else:
                try:
                    message = self.outgoing.get(timeout=self.heartbeat)
                except queue.Empty:
                    message = pb.WorkerMessage(heartbeat=pb.Heartbeat(at_unix_ms=int(time.time() * 1000)))
            if message is None:
                return
            if message.WhichOneof("body") != "result" or self.max_batch < 2:
                yield message
                continue
            results = [message.result]
            closing = False
            while len(results) < self.max_batch:
                try:
                    following = self.outgoing.get_nowait()
                except queue.Empty:
                    break
                if following is None:
                    closing = True
                    break
                if following.WhichOneof("body") == "result":
                    results.append(following.result)
                else:
                    held = following
                    break
            if len(results) == 1:
                yield message
            else:
                yield pb.WorkerMessage(results=pb.ResultBatch(results=results))
            if closing:
                return

    def serve(self) -> None:
        worker = self.worker
        stub = rpc.WorkerServiceStub(channel(worker.url, worker._ca))
        responses = stub.Join(self.requests(), metadata=worker._metadata)
        watcher = threading.Thread(target=self.watch_for_stop, daemon=True)
        try:
            first = next(responses)
            if first.WhichOneof("body") != "welcome":
                raise errors.WeftError("the coordinator sent no welcome")
            self.heartbeat = max(first.welcome.heartbeat_interval_ms, 50) / 1000
            self.max_batch = max(first.welcome.max_batch, 1)
            print(f"weft worker {worker.name}: joined the coordinator as {first.welcome.worker_id}", flush=True)
            watcher.start()
            for message in responses:
                self.handle(message)
        except grpc.RpcError as error:
            if self.draining and error.code() == grpc.StatusCode.CANCELLED:
                return
            raise errors.from_rpc(error) from None
        finally:
            self.outgoing.put(None)

    def watch_for_stop(self) -> None:
        """On stop: says so, waits for the tasks running, then closes this
        side; the coordinator then closes its side and `serve` returns."""
        self.worker._stopping.wait()
        self.draining = True
        self.outgoing.put(pb.WorkerMessage(drain=pb.Drain()))
        while True:
            with self.lock:
                if not self.running:
                    break
            time.sleep(0.02)
        self.outgoing.put(None)

    def handle(self, message: pb.CoordinatorMessage) -> None:
        kind = message.WhichOneof("body")
        if kind == "task":
            self.start(message.task)
        elif kind == "tasks":
            for task in message.tasks.tasks:
                self.start(task)
        elif kind == "cancel":
            with self.lock:
                running = self.running.get((message.cancel.run_id, message.cancel.task_key))
                if running is not None:
                    running.cancelled = True
                    if running.future is not None:
                        running.future.cancel()
        elif kind == "forget":
            self.fields.pop(message.forget.run_id, None)
        elif kind == "deliver":
            delivery = message.deliver
            with self.lock:
                running = self.running.get((delivery.run_id, delivery.task_key))
            if running is not None and running.team is not None:
                running.team.deliver(message_of(delivery.message))
        elif kind == "call" and message.call.HasField("tool"):
            self.tool_call(message.call)
        elif kind == "call":
            self.worker._pool.submit(self.call, message.call)
        elif kind == "send_ack":
            self.acks.answered(message.send_ack.send_id, message.send_ack.error or None)

    def state_of(self, task: pb.TaskAssignment) -> dict[str, Any]:
        """The task's state: the values it carries (kept for later tasks)
        and those the worker holds; raises KeyError naming a field that
        should be held but is not."""
        held = self.fields.setdefault(task.run_id, {})
        state: dict[str, Any] = {}
        for sent in task.state:
            if sent.json:
                value = json.loads(sent.json)
                held[sent.name] = (sent.version, value)
                state[sent.name] = value
            else:
                version, value = held.get(sent.name, (None, None))
                if version != sent.version:
                    raise KeyError(sent.name)
                state[sent.name] = value
        return state

    def start(self, task: pb.TaskAssignment) -> None:
        key = (task.run_id, task.task_key)
        if self.draining:
            self.outgoing.put(pb.WorkerMessage(refused=pb.TaskRefused(run_id=task.run_id, task_key=task.task_key)))
            return
        try:
            state = self.state_of(task)
        except KeyError as missing:
            message = f"this worker does not hold version of field '{missing.args[0]}' the task expects"
            self.report(task, error=("state_cache_miss", message))
            return
        config = json.loads(task.config_json) if task.config_json else {}
        name = config.get("handler", "")
        handler = self.worker._handlers.get(name)
        if handler is None:
            self.report(task, error=("unknown_handler", f"this worker hosts no handler '{name}'"))
            return
        item = Item(task.item.map, task.item.index, task.item.step) if task.HasField("item") else None
        context = TaskContext(
            run_id=task.run_id,
            node=task.node,
            attempt=task.attempt,
            task_key=task.task_key,
            scope=json.loads(task.scope_json) if task.scope_json else {},
            item=item,
            config=config,
        )
        running = _Running(team=self.team_of(task))
        context.team = running.team
        with self.lock:
            self.running[key] = running
        if inspect.iscoroutinefunction(handler):
            future = asyncio.run_coroutine_threadsafe(handler(state, context), self.worker._event_loop())
        else:
            future = self.worker._pool.submit(handler, state, context)
        running.future = future
        future.add_done_callback(lambda done: self.finished(task, done))

    def call(self, call: pb.FunctionCall) -> None:
        """Answers a call of a registered function (on a pool thread)."""
        answer = pb.CallResult(call_id=call.call_id, run_id=call.run_id)
        function = self.worker._functions.get(call.name)
        if call.judge or call.HasField("python") or function is None:
            answer.error = f"this worker has no function '{call.name}'"
        else:
            try:
                args = json.loads(call.args_json) if call.args_json else []
                answer.value_json = json.dumps(function(*args))
            except Exception as failure:  # the call's error, whatever it is
                answer.error = f"fn:{call.name} failed: {type(failure).__name__}: {failure}"
        self.outgoing.put(pb.WorkerMessage(call_result=answer))

    def tool_call(self, call: pb.FunctionCall) -> None:
        """Calls a registered tool for an agent step on another worker: on
        the pool, or on the event loop for an `async def`; the answer goes
        back when it returns."""
        tool = self.worker._tools.get(call.name)
        if tool is None:
            self.answer_tool(call, error=f"this worker has no tool '{call.name}'")
            return
        caller = call.tool
        context = ToolContext(
            run_id=call.run_id,
            node=caller.node,
            attempt=caller.attempt,
            task_key=caller.task_key,
            scope=json.loads(caller.scope_json) if caller.scope_json else {},
            item=caller.item if caller.HasField("item") else None,
        )
        try:
            args = json.loads(call.args_json) if call.args_json else []
            arguments = args[0] if args else {}
        except ValueError as error:
            self.answer_tool(call, error=f"bad arguments: {error}")
            return
        if inspect.iscoroutinefunction(tool.function):
            future = asyncio.run_coroutine_threadsafe(tool.function(arguments, context), self.worker._event_loop())
        else:
            future = self.worker._pool.submit(tool.function, arguments, context)
        future.add_done_callback(lambda done: self.tool_returned(call, done))

    def tool_returned(self, call: pb.FunctionCall, done: Future) -> None:
        failure = None if done.cancelled() else done.exception()
        if done.cancelled():
            self.answer_tool(call, error="the tool was cancelled")
        elif isinstance(failure, HandlerFailed):
            self.answer_tool(call, error=str(failure))
        elif failure is not None:
            self.answer_tool(call, error=f"{type(failure).__name__}: {failure}")
        else:
            try:
                self.answer_tool(call, value=json.dumps(done.result()))
            except (TypeError, ValueError) as error:
                self.answer_tool(call, error=f"the tool returned what is not JSON: {error}")

    def answer_tool(self, call: pb.FunctionCall, value: Optional[str] = None, error: Optional[str] = None) -> None:
        answer = pb.CallResult(call_id=call.call_id, run_id=call.run_id, tool=True)
        if error is not None:
            answer.error = error
        else:
            answer.value_json = value or "null"
        self.outgoing.put(pb.WorkerMessage(call_result=answer))

    def team_of(self, task: pb.TaskAssignment) -> Optional[Team]:
        """The step's team, when it has a seat in one."""
        if not task.HasField("team"):
            return None
        seat = task.team

        def send(send_id: int, to: str, content: str) -> None:
            outgoing = pb.TeamSend(run_id=task.run_id, task_key=task.task_key, send_id=send_id, to=to,
                                   content_json=content)
            self.outgoing.put(pb.WorkerMessage(send=outgoing))

        inbox = [message_of(m) for m in seat.inbox]
        return Team(seat.me, list(seat.members), inbox, send, self.acks)

    def finished(self, task: pb.TaskAssignment, done: Future) -> None:
        with self.lock:
            running = self.running.pop((task.run_id, task.task_key), None)
        read = running.team.read() if running is not None and running.team is not None else []
        if done.cancelled() or (running is not None and running.cancelled):
            self.report(task, error=("cancelled", "the coordinator cancelled the task"))
            return
        failure = done.exception()
        if failure is None:
            try:
                text = json.dumps(done.result())
            except (TypeError, ValueError) as error:
                self.report(task, error=("invalid_output", f"the handler returned what is not JSON: {error}"))
                return
            self.report(task, output=text, read=read)
        elif isinstance(failure, HandlerFailed):
            self.report(task, error=("handler_error", str(failure)))
        else:
            frames = traceback.extract_tb(failure.__traceback__)
            # The handler's frames, not the pool's that called it.
            own = [frame for frame in frames if not frame.filename.endswith(("concurrent/futures/thread.py", "weft/worker.py"))]
            text = "".join(traceback.format_list(own)) + "".join(traceback.format_exception_only(failure))
            self.report(task, error=("handler_error", "Traceback (most recent call last):\n" + text))

    def report(self, task: pb.TaskAssignment, output: Optional[str] = None,
               error: Optional[tuple[str, str]] = None, read: Optional[list[int]] = None) -> None:
        result = pb.TaskResult(run_id=task.run_id, task_key=task.task_key, messages_read=read or [])
        if error is not None:
            result.error.CopyFrom(pb.TaskError(kind=error[0], message=error[1]))
        else:
            result.output.CopyFrom(pb.TaskOutput(json=output or "{}"))
        self.outgoing.put(pb.WorkerMessage(result=result))


def message_of(wire: pb.TeamMessage) -> Message:
    """A teammate message in the SDK's terms."""
    content = json.loads(wire.content_json) if wire.content_json else None
    return Message(getattr(wire, "from"), content, wire.seq)
