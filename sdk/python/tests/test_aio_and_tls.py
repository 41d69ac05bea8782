"""`weft.aio.Client` against a real cluster, and both clients over TLS."""

from __future__ import annotations

import asyncio
import time

import pytest

import weft
from conftest import OPERATOR
from test_client import APPROVAL, ECHO


def test_the_async_client_submits_follows_and_answers(cluster):
    async def scenario() -> tuple[list[str], weft.RunInfo, weft.RunInfo]:
        async with weft.aio.Client(cluster.url) as client:
            run = await client.submit(APPROVAL)
            kinds = []
            async for event in run.events():
                kinds.append(event.type)
                if event.type == "waiting_for_input":
                    await client.resume(run.run_id, event["node"], "reject", comment="not yet")
                if event.type == "run_finished":
                    break
            done = await run.wait(timeout=30)
            with pytest.raises(weft.RunNotFound):
                await client.get("run-nope")
            echoed = await (await client.submit(ECHO)).wait(timeout=30)
            return kinds, done, echoed

    kinds, done, echoed = asyncio.run(scenario())
    assert kinds[0] == "run_submitted" and "input_received" in kinds and kinds[-1] == "run_finished"
    assert done.status == "completed"
    assert done.state["approved"] is False and done.state["approved_comment"] == "not yet"
    assert done.answers == [weft.Answer("approve", "anonymous", False)]
    assert echoed.state == {"n": 42}


def test_an_async_wait_times_out():
    async def scenario() -> None:
        client = weft.aio.Client("http://127.0.0.1:9")
        with pytest.raises((TimeoutError, weft.Unavailable)):
            await client.wait("run-x", timeout=0.5)
        await client.close()

    asyncio.run(scenario())


def test_an_awaited_call_cancelled_stops_and_the_client_goes_on(cluster):
    from test_client import LONG

    async def scenario() -> str:
        async with weft.aio.Client(cluster.url) as client:
            run = await client.submit(LONG)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(run.wait(), 0.3)
            with pytest.raises(TimeoutError, match="did not end within 0.2 s"):
                await run.wait(timeout=0.2)
            # Events read in part, then left: the feed is dropped.
            async for event in run.events():
                if event.type == "node_started":
                    break
            cancelled = await client.cancel(run.run_id)
            return cancelled.status

    assert asyncio.run(scenario()) == "cancelled"


def test_a_coordinator_over_tls_is_reached_with_its_ca(tls):
    cluster, ca = tls
    assert cluster.url.startswith("https://")
    client = weft.Client(cluster.url, token=OPERATOR, ca=str(ca))
    assert client.submit(ECHO).wait(timeout=30).state == {"n": 42}

    async def asynchronously() -> weft.RunInfo:
        async with weft.aio.Client(cluster.url, token=OPERATOR, ca=str(ca)) as client:
            return await (await client.submit(ECHO)).wait(timeout=30)

    assert asyncio.run(asynchronously()).status == "completed"
    # Without the CA, the system's roots do not know the certificate: said
    # at once (asking again would end the same way), as is a plaintext
    # client at the TLS port.
    started = time.monotonic()
    with pytest.raises(weft.Unavailable, match=r"not signed by a CA this client trusts: give the CA that signed it with ca= \(or WEFT_CA\)$"):
        weft.Client(cluster.url, token=OPERATOR).runs()
    with pytest.raises(weft.Unavailable, match="https://"):
        weft.Client(cluster.url.replace("https://", "http://"), token=OPERATOR).runs()
    assert time.monotonic() - started < 10
    with pytest.raises(weft.Unauthenticated):
        weft.Client(cluster.url, ca=str(ca)).runs()


def test_the_async_client_runs_many_runs_at_once_inside_a_running_loop(cluster):
    from test_client import DOUBLE

    async def scenario() -> list[int]:
        # Inside the loop asyncio.run started: nothing of the client may
        # block it, so a ticker keeps ticking while the runs go on.
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        async with weft.aio.Client(cluster.url) as client:
            runs = await asyncio.gather(*(client.submit(DOUBLE, input={"n": n}) for n in range(16)))
            results = await asyncio.gather(*(run.wait(timeout=60) for run in runs))
        ticker.cancel()
        assert ticks > 0
        return [result.state["n"] for result in results]

    assert asyncio.run(scenario()) == [n * 2 for n in range(16)]
