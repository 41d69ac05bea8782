"""A Python worker for the tests: `python handlers.py URL NAME [TOKEN]`.

Handlers: `shout` (upper-cases `text`, says what it knew of its attempt),
`square` (a map item's number, and which worker squared it), `explode`
(raises), `slow` (touches `started-NAME` in its `marks` directory, then
sleeps `seconds`), `wait_async` (an `async` handler).
"""

import asyncio
import sys
import time
from pathlib import Path

import weft

url, name = sys.argv[1], sys.argv[2]
token = sys.argv[3] if len(sys.argv) > 3 else None
worker = weft.Worker(url, token=token, slots=4, name=name)


@worker.handler("shout")
def shout(state, ctx):
    return {"text": state["text"].upper(), "seen": {"node": ctx.node, "attempt": ctx.attempt, "key": ctx.task_key}}


@worker.handler("square")
def square(state, ctx):
    n = ctx.scope["n"]
    return {"squared": {"n": n * n, "by": name, "index": ctx.item.index}}


def deeper(x):
    raise ValueError(f"boom at {x}")


@worker.handler("explode")
def explode(state, ctx):
    deeper(3)


@worker.handler("slow")
def slow(state, ctx):
    Path(state["marks"], f"started-{name}").touch()
    time.sleep(state["seconds"])
    return {"finished_by": name}


@worker.handler("wait_async")
async def wait_async(state, ctx):
    await asyncio.sleep(0.05)
    return {"waited": True}


worker.run()
print(f"{name} stopped", flush=True)
