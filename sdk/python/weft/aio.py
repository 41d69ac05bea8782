"""The client for `asyncio` programs: `weft.Client`'s API with `async`
methods, over `grpc.aio`.

    async with weft.aio.Client("http://127.0.0.1:7700") as client:
        run = await client.submit("graph.yaml", input={"topic": "tokio"})
        async for event in run.events():
            print(event.type)
        result = await run.wait()
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, AsyncIterator, Optional, Union

import grpc
import grpc.aio

from . import errors
from .client import _MAX_MESSAGE, ENDS, Graph, bundle_of, bundle_to_wire, settings, submit_request
from .events import event_from_wire
from .types import Delta, Event, History, RunInfo, checked_status, delta_from_wire, history_from_wire, place_request, run_from_wire
from .v1 import runs_pb2 as pb
from .v1 import runs_pb2_grpc as rpc


def channel(url: str, ca: Optional[str] = None) -> grpc.aio.Channel:
    """An asyncio channel to `url` (see `weft.client.channel`)."""
    options = [
        ("grpc.max_receive_message_length", _MAX_MESSAGE),
        ("grpc.max_send_message_length", _MAX_MESSAGE),
    ]
    if url.startswith("https://"):
        roots = Path(ca).read_bytes() if ca else None
        credentials = grpc.ssl_channel_credentials(root_certificates=roots)
        return grpc.aio.secure_channel(url.removeprefix("https://"), credentials, options)
    if url.startswith("http://"):
        return grpc.aio.insecure_channel(url.removeprefix("http://"), options)
    raise ValueError(f"coordinator URL '{url}' must start with http:// or https://")


class Run:
    """A submitted run, for `asyncio`."""

    def __init__(self, client: "Client", run_id: str, warnings: Optional[list[str]] = None) -> None:
        self.client = client
        self.run_id = run_id
        self.warnings = warnings or []

    def __repr__(self) -> str:
        return f"Run({self.run_id!r})"

    def events(self, start: int = 0) -> AsyncIterator[Event]:
        """The run's events from position `start`, as they happen."""
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
        self._channel = channel(self.url, ca)
        self._stub = rpc.RunServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()

    async def close(self) -> None:
        """Closes the connection."""
        await self._channel.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _call(self, method: str, request: Any, graph: bool = False) -> Any:
        try:
            return await getattr(self._stub, method)(request, metadata=self._metadata)
        except grpc.RpcError as error:
            raise errors.from_rpc(error, graph=graph) from None

    async def submit(
        self,
        graph: Graph,
        input: Optional[dict[str, Any]] = None,
        priority: Optional[str] = None,
        no_cache: bool = False,
    ) -> Run:
        """Submits `graph` with `input` (see `weft.Client.submit`)."""
        request = submit_request(graph, input, priority, no_cache)
        response = await self._call("Submit", request, graph=True)
        return Run(self, response.run_id, list(response.warnings))

    async def validate(self, graph: Graph) -> list[str]:
        """What the coordinator finds wrong with `graph`, one line each."""
        response = await self._call("Validate", pb.ValidateRequest(bundle=bundle_to_wire(bundle_of(graph))), graph=True)
        return [f"{f.severity}: {f.message}" for f in response.findings]

    def run(self, run_id: str) -> Run:
        """A handle on the run `run_id`."""
        return Run(self, run_id)

    async def get(self, run_id: str) -> RunInfo:
        """The run `run_id` with its state."""
        return run_from_wire(await self._call("GetRun", pb.GetRunRequest(run_id=run_id)))

    async def status(self, run_id: str) -> RunInfo:
        """The run without its state."""
        return run_from_wire(await self._call("GetRun", pb.GetRunRequest(run_id=run_id, omit_state=True)))

    async def runs(self, status: Optional[str] = None, limit: int = 100) -> list[RunInfo]:
        """Runs, newest first (see `weft.Client.runs`)."""
        checked_status(status)
        found: list[RunInfo] = []
        after = ""
        while len(found) < limit:
            page = await self._call("ListRuns", pb.ListRunsRequest(limit=min(1000, max(limit, 100)), after=after))
            found += [run for run in map(run_from_wire, page.runs) if status is None or run.status == status]
            if not page.next:
                break
            after = page.next
        return found[:limit]

    async def events(self, run_id: str, start: int = 0) -> AsyncIterator[Event]:
        """The events of run `run_id` from position `start`."""
        async for event in self._events(run_id, start, ()):
            yield event

    async def stream(self, run_id: str, start: int = 0) -> AsyncIterator[Delta]:
        """The model output of run `run_id`'s steps from offset `start`."""
        request = pb.StreamRunRequest(run_id=run_id, **{"from": start})
        stream = self._stub.StreamRun(request, metadata=self._metadata)
        try:
            async for message in stream:
                yield delta_from_wire(message)
        except grpc.RpcError as error:
            raise errors.from_rpc(error) from None

    async def _events(self, run_id: str, start: int, types: tuple) -> AsyncIterator[Event]:
        """The events of run `run_id` from `start`, those of `types` (none: all)."""
        request = pb.WatchRunRequest(run_id=run_id, types=types, **{"from": start})
        stream = self._stub.WatchRun(request, metadata=self._metadata)
        try:
            async for message in stream:
                event = event_from_wire(message)
                if event is not None:
                    yield event
        except grpc.RpcError as error:
            raise errors.from_rpc(error) from None

    async def wait(self, run_id: str, timeout: Optional[float] = None) -> RunInfo:
        """Run `run_id` once it has ended or waits for a person; raises
        `TimeoutError` after `timeout` seconds."""

        async def settled() -> RunInfo:
            start = 0
            while True:
                info = await self.get(run_id)
                if info.done or info.status == "waiting":
                    return info
                # Only the events that end or pause a run are sent.
                async for event in self._events(run_id, start, ENDS):
                    start = event.seq + 1
                    if event.ends_or_pauses:
                        break

        try:
            return await asyncio.wait_for(settled(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"run {run_id} did not end within {timeout} s") from None

    async def resume(self, run_id: str, node: str, value: Any, comment: Optional[str] = None) -> RunInfo:
        """Answers the waiting node `node` (see `weft.Client.resume`)."""
        request = pb.ResumeRequest(run_id=run_id, node=node, value_json=json.dumps(value), comment=comment or "")
        return run_from_wire(await self._call("Resume", request))

    async def cancel(self, run_id: str) -> RunInfo:
        """Cancels a running or waiting run."""
        return run_from_wire(await self._call("Cancel", pb.CancelRequest(run_id=run_id)))

    async def retry(self, run_id: str) -> RunInfo:
        """Runs a failed run's failed wave again."""
        return run_from_wire(await self._call("Retry", pb.RetryRequest(run_id=run_id)))

    async def fork(
        self, run_id: str, at: Union[int, str, None] = None, set: Optional[dict[str, Any]] = None
    ) -> Run:
        """A new run from run `run_id`'s state at place `at`, with the
        fields of `set` replaced (see `weft.Client.fork`)."""
        request = pb.ForkRequest(
            run_id=run_id,
            **place_request(at),
            set_json={name: json.dumps(value) for name, value in (set or {}).items()},
        )
        response = await self._call("Fork", request)
        return Run(self, response.run_id, list(response.warnings))

    async def history(self, run_id: str, at: Union[int, str, None] = None) -> History:
        """The waves run `run_id`'s history keeps, and its state at
        place `at` (see `weft.Client.history`)."""
        request = pb.GetHistoryRequest(run_id=run_id, **place_request(at))
        return history_from_wire(await self._call("GetHistory", request))

    async def delete(self, run_id: str) -> None:
        """Removes an ended run and its records."""
        await self._call("DeleteRun", pb.DeleteRunRequest(run_id=run_id))
