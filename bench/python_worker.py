"""The Python worker of bench/python_sdk.py: W1's `inc` and W2's `double`.

    python bench/python_worker.py URL SLOTS
"""

import sys

import weft

worker = weft.Worker(sys.argv[1], slots=int(sys.argv[2]), name="py-bench")


@worker.handler("inc")
def inc(state, ctx):
    return {"counter": state["counter"] + 1}


@worker.handler("double")
def double(state, ctx):
    return {"doubled": ctx.scope["item"] * 2}


worker.run()
