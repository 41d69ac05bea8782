"""A Python worker for the tests: `python handlers.py URL NAME [TOKEN]`.

Handlers: `shout` (upper-cases `text`, says what it knew of its attempt),
`square` (a map item's number, and which worker squared it), `explode`
(raises), `slow` (touches `started-NAME` in its `marks` directory, then
sleeps `seconds`), `wait_async` (an `async` handler), `converse` (a
teammate step: greets every member, waits to hear from each), `pass_along`
(a ring of teammates, as the Rust test worker's), `not_json`
(returns a date), `blocks` (never returns; `release()`d by nothing),
`raise_async` (an `async` handler that raises), `counts_calls` (appends
to `calls` how many calls its thread has made, kept in a
`threading.local`). Tools:
`lookup` (a key in a small table; key `ctx` answers with its context;
another key raises), `lookup_async` (the same, `async`), `nap` (touches the
file `marker`, then sleeps `seconds`), `meet` (returns once a second call
of it has come too).
"""

import asyncio
import datetime
import sys
import threading
import time
from pathlib import Path

import weft

url, name = sys.argv[1], sys.argv[2]
token = sys.argv[3] if len(sys.argv) > 3 else None
worker = weft.Worker(url, token=token, slots=4, name=name)


@worker.handler("shout")
def shout(state, ctx):
    return {"text": state["text"].upper(), "seen": {"node": ctx.node, "attempt": ctx.attempt, "key": ctx.task_key,
                                                     "config": ctx.config, "item": ctx.item, "scope": ctx.scope}}


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


@worker.handler("pass_along")
def pass_along(state, ctx):
    team = ctx.team
    after = team.members[(team.members.index(team.me) + 1) % len(team.members)]
    team.send(after, {"from": team.me})
    message = team.recv(timeout=30)
    assert message is not None, f"{team.me} heard nothing"
    return {"passed": {"got": message.content, "by": name}}


@worker.handler("not_json")
def not_json(state, ctx):
    return {"on": datetime.date(2026, 12, 7)}


BLOCKED = threading.Event()


@worker.handler("blocks")
def blocks(state, ctx):
    BLOCKED.wait()
    return {}


PER_THREAD = threading.local()


@worker.handler("counts_calls")
def counts_calls(state, ctx):
    PER_THREAD.calls = getattr(PER_THREAD, "calls", 0) + 1
    return {"calls": state["calls"] + [PER_THREAD.calls]}


@worker.handler("raise_async")
async def raise_async(state, ctx):
    await asyncio.sleep(0.01)
    raise LookupError("nothing here")


@worker.handler("converse")
def converse(state, ctx):
    team = ctx.team
    for member in team.members:
        if member != team.me:
            team.send(member, {"hello": team.me})
    stranger = ""
    if team.me.endswith("/1"):
        try:
            team.send("nobody/0", "hi")
        except weft.TeamError as error:
            stranger = str(error)
    heard = set()
    while len(heard) < len(team.members) - 1:
        message = team.recv(timeout=20)
        assert message is not None, f"{team.me} heard only {sorted(heard)}"
        assert message.content == {"hello": message.sender}
        heard.add(message.sender)
    return {"said": {"me": team.me, "heard": sorted(heard), "stranger": stranger}}


@worker.function("longest")
def longest(before, writes):
    return max([before or ""] + writes, key=len)


@worker.function("broken")
def broken(before, writes):
    raise RuntimeError("no")


TABLE = {"a": "alpha", "b": "beta"}


@worker.tool("lookup", {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]})
def lookup(args, ctx):
    """Look a key up in the reference table."""
    if args["key"] == "ctx":
        return {"node": ctx.node, "attempt": ctx.attempt, "task_key": ctx.task_key, "item": ctx.item,
                "scope": ctx.scope, "worker": name}
    if args["key"] not in TABLE:
        raise KeyError(f"no entry for {args['key']!r}")
    return TABLE[args["key"]]


@worker.tool("lookup_async", {"type": "object", "properties": {"key": {"type": "string"}}},
             description="The same table, looked up on the event loop.")
async def lookup_async(args, ctx):
    await asyncio.sleep(0.01)
    return {"value": TABLE.get(args.get("key", ""), None)}


@worker.tool("nap", {"type": "object", "properties": {"marker": {"type": "string"}, "seconds": {"type": "number"}}})
def nap(args, ctx):
    """Sleep a while."""
    Path(args["marker"]).touch()
    time.sleep(args["seconds"])
    return "rested"


MEETING = threading.Barrier(2)


@worker.tool("meet")
def meet(args, ctx):
    """Wait for one other call of this tool."""
    MEETING.wait(timeout=10)
    return "met"


worker.run()
print(f"{name} stopped", flush=True)
