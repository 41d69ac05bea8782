"""A Weft worker with two handlers, written in Python.

    WEFT_COORDINATOR=http://127.0.0.1:7700 python worker.py

A graph uses them with `kind: task, handler: slugify` and `handler: count_words`.
"""

import re

import weft

worker = weft.Worker(slots=4)  # WEFT_COORDINATOR, WEFT_WORKER_TOKEN, WEFT_CA


@worker.handler("slugify")
def slugify(state, ctx):
    return {"slug": re.sub(r"[^a-z0-9]+", "-", state["title"].lower()).strip("-")}


@worker.handler("count_words")
def count_words(state, ctx):
    return {"words": len(state["text"].split())}


if __name__ == "__main__":
    worker.run()  # until SIGTERM or Ctrl-C, then drains
