"""The client for `asyncio` programs: `weft.Client`'s API with `async`
methods, on the same Rust client. A call runs on the core's own threads
and completes an `asyncio` future on the caller's loop, so the loop never
waits on the network; cancelling the awaiting task stops the call.

    async with weft.aio.Client("http://127.0.0.1:7700") as client:
        run = await client.submit("graph.yaml", input={"topic": "tokio"})
        async for event in run.events():
            print(event.type)
        result = await run.wait()
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Optional, Union

from .client import Graph, checked_priority, connect, graph_argument, settings
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


async def settled(start: Callable[[Callable[[Any, Optional[BaseException]], None]], Any]) -> Any:
    """Awaits a native call: `start(done)` begins it and returns what
    cancels it; `done(value, exception)` is called from the core's
    threads when it is over."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(value: Any, exception: Optional[BaseException]) -> None:
        if future.done():
            return
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(value)

    def done(value: Any, exception: Optional[BaseException]) -> None:
        loop.call_soon_threadsafe(settle, value, exception)

    pending = start(done)
    try:
        return await future
    except asyncio.CancelledError:
        pending.cancel()
        raise


class Run:
    """A submitted run, for `asyncio`."""

    def __init__(self, client: "Client", run_id: str, warnings: Optional[list[str]] = None) -> None:
        self.client = client
        self.run_id = run_id
        self.warnings = warnings or []

    def __repr__(self) -> str:
        return f"Run({self.run_id!r})"

    def events(self, start: int = 0) -> AsyncIterator[Event]:
        """The run's events from position `start`, as they happen; ends
        with the run's `run_finished`."""
        return self.client.events(self.run_id, start)

    def stream(self, start: int = 0) -> AsyncIterator[Delta]:
        """The model output of the run's steps as it is written, from
        offset `start` (see `weft.Run.stream`)."""
        return self.client.stream(self.run_id, start)

    async def history(self, at: Union[int, str, None] = None) -> History:
        """The run's history and its state at place `at` (see
        `weft.Run.history`)."""
        return await self.client.history(self.run_id, at)

    async def fork(self, at: Union[int, str, None] = None, set: Optional[dict[str, Any]] = None) -> "Run":
        """A new run from this one's state at place `at`, with the fields
        of `set` replaced (see `weft.Client.fork`)."""
        return await self.client.fork(self.run_id, at, set)

    async def wait(self, timeout: Optional[float] = None) -> RunInfo:
        """The run once it has ended or waits for a person."""
        return await self.client.wait(self.run_id, timeout)

    async def get(self) -> RunInfo:
        """The run now."""
        return await self.client.get(self.run_id)


class Client:
    """`weft.Client` for `asyncio`; the same arguments and defaults."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, ca: Optional[str] = None) -> None:
        self.url, token, ca = settings(url, token, ca)
        self._native = connect(self.url, token, ca)

    async def close(self) -> None:
        """Closes the connection; later calls raise `WeftError`."""
        self._native.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def submit(
        self,
        graph: Graph,
        input: Optional[dict[str, Any]] = None,
        priority: Optional[str] = None,
        no_cache: bool = False,
    ) -> Run:
        """Submits `graph` with `input` (see `weft.Client.submit`)."""
        arguments = (graph_argument(graph), input or {}, checked_priority(priority), no_cache)
        run_id, warnings = await settled(lambda done: self._native.submit(*arguments, done))
        return Run(self, run_id, warnings)

    async def validate(self, graph: Graph) -> list[str]:
        """What the coordinator finds wrong with `graph`, one line each."""
        argument = graph_argument(graph)
        findings = await settled(lambda done: self._native.validate(argument, done))
        return [f"{f['severity']}: {f['message']}" for f in findings]

    def run(self, run_id: str) -> Run:
        """A handle on the run `run_id`."""
        return Run(self, run_id)

    async def get(self, run_id: str) -> RunInfo:
        """The run `run_id` with its state."""
        return run_from_json(await settled(lambda done: self._native.get(run_id, False, done)))

    async def status(self, run_id: str) -> RunInfo:
        """The run without its state."""
        return run_from_json(await settled(lambda done: self._native.get(run_id, True, done)))

    async def runs(self, status: Optional[str] = None, limit: int = 100) -> list[RunInfo]:
        """Runs, newest first (see `weft.Client.runs`)."""
        checked_status(status)
        found: list[RunInfo] = []
        after = None
        page_size = min(1000, max(limit, 100))
        while len(found) < limit:
            page, after = await settled(lambda done: self._native.list_page(page_size, after, done))
            found += [run for run in map(run_from_json, page) if status is None or run.status == status]
            if after is None:
                break
        return found[:limit]

    async def events(self, run_id: str, start: int = 0) -> AsyncIterator[Event]:
        """The events of run `run_id` from position `start`."""
        feed = self._native.events(run_id, start)
        while (item := await settled(feed.next)) is not None:
            yield event_from_json(*item)

    async def stream(self, run_id: str, start: int = 0) -> AsyncIterator[Delta]:
        """The model output of run `run_id`'s steps from offset `start`."""
        feed = self._native.stream(run_id, start)
        while (item := await settled(feed.next)) is not None:
            yield delta_from_json(item)

    async def wait(self, run_id: str, timeout: Optional[float] = None) -> RunInfo:
        """Run `run_id` once it has ended or waits for a person; raises
        `TimeoutError` after `timeout` seconds."""
        return run_from_json(await settled(lambda done: self._native.wait(run_id, timeout, done)))

    async def resume(self, run_id: str, node: str, value: Any, comment: Optional[str] = None) -> RunInfo:
        """Answers the waiting node `node` (see `weft.Client.resume`)."""
        return run_from_json(await settled(lambda done: self._native.resume(run_id, node, value, comment, done)))

    async def cancel(self, run_id: str) -> RunInfo:
        """Cancels a running or waiting run."""
        return run_from_json(await settled(lambda done: self._native.cancel(run_id, done)))

    async def retry(self, run_id: str) -> RunInfo:
        """Runs a failed run's failed wave again."""
        return run_from_json(await settled(lambda done: self._native.retry(run_id, done)))

    async def fork(
        self, run_id: str, at: Union[int, str, None] = None, set: Optional[dict[str, Any]] = None
    ) -> Run:
        """A new run from run `run_id`'s state at place `at`, with the
        fields of `set` replaced (see `weft.Client.fork`)."""
        where, fields = place(at), set or {}
        fork_id, warnings = await settled(lambda done: self._native.fork(run_id, where, fields, done))
        return Run(self, fork_id, warnings)

    async def history(self, run_id: str, at: Union[int, str, None] = None) -> History:
        """The places run `run_id`'s history keeps, and its state at
        place `at` (see `weft.Client.history`)."""
        where = place(at)
        return history_from_json(await settled(lambda done: self._native.history(run_id, where, done)))

    async def delete(self, run_id: str) -> None:
        """Removes an ended run and its records."""
        await settled(lambda done: self._native.delete(run_id, done))
