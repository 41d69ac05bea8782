"""Weft's Python host: serves function calls as JSON lines (SPEC 4.3).

Requests arrive one per line on stdin, answers leave one per line on the
protocol pipe (the original stdout). Whatever user code prints -- print()
or a C library writing to fd 1 -- goes to stderr instead, so it can never
corrupt the protocol.

Requests:
  {"id": N, "op": "call", "module": M, "function": F, "args": [...],
   "kwargs": {...}, "form": "positional" | "keywords" | "loop_iteration",
   "mask": [secret values to keep out of what is printed],
   "run": R, "fresh": {field: value}, "held": [field], "forget": [run]}
The last four pass state fields as keyword arguments (before `kwargs`,
which win): `fresh` values are kept per run, `held` names ones sent
before, and the state of a `forget` run is dropped.
  {"id": N, "op": "signatures", "module": M}
M is a path to a .py file (imported by path under a private name, so two
bundles' helpers.py never collide) or a dotted module name (imported from
the working directory, the graph's, then installed packages). Keyword
arguments a function does not take are left out unless it takes **kwargs.
Answers: {"id": N, "ok": VALUE} or {"id": N, "error": TEXT}.
"""

import importlib
import importlib.util
import inspect
import json
import os
import sys
import traceback

protocol = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)


class Masked:
    """stderr with the current call's secret values replaced by ***."""

    def __init__(self, stream):
        self.stream = stream
        self.secrets = []

    def write(self, text):
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


sys.stderr = Masked(sys.stderr)
sys.stdout = sys.stderr

modules = {}
accepts = {}
states = {}


def load(module):
    if module in modules:
        return modules[module]
    if module.endswith(".py"):
        path = os.path.abspath(module)
        name = "weft_sidecar_%d" % len(modules)
        spec = importlib.util.spec_from_file_location(name, path)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        loaded = importlib.import_module(module)
    modules[module] = loaded
    return loaded


def parameters(function):
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return {"params": [], "var_keyword": True}
    params = []
    var_keyword = False
    for p in signature.parameters.values():
        if p.kind == p.VAR_KEYWORD:
            var_keyword = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            params.append(p.name)
    return {"params": params, "var_keyword": var_keyword}


def taken(function, kwargs):
    """The keyword arguments `function` takes (all, with **kwargs)."""
    key = id(function)
    if key not in accepts:
        accepts[key] = parameters(function)
    wanted = accepts[key]
    if wanted["var_keyword"]:
        return kwargs
    return {k: v for k, v in kwargs.items() if k in wanted["params"]}


class LoopIteration:
    """What an `until` predicate receives (SPEC 4.2), with attributes."""

    def __init__(self, fields):
        for name, value in fields.items():
            if name == "history" and isinstance(value, list):
                value = [Record(v) if isinstance(v, dict) else v for v in value]
            setattr(self, name, value)
        # Seed 002 calls the body's value `result` too.
        if not hasattr(self, "result"):
            self.result = fields.get("output")

    def __repr__(self):
        return "LoopIteration(%r)" % vars(self)


class Record:
    def __init__(self, fields):
        self.__dict__.update(fields)

    def get(self, name, default=None):
        return self.__dict__.get(name, default)

    def __getitem__(self, name):
        return self.__dict__[name]

    def __repr__(self):
        return repr(self.__dict__)


def verdict(value):
    """An until's answer: a bool, or [bool, reason] from a pair."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return [bool(value[0]), None if value[1] is None else str(value[1])]
    return bool(value)


def awaited(value):
    """An `async def` function's result, run to its end."""
    if inspect.iscoroutine(value):
        import asyncio
        return asyncio.run(value)
    return value


def call(request):
    module = load(request["module"])
    function = getattr(module, request["function"], None)
    if function is None or not callable(function):
        raise LookupError("%s has no function %r" % (request["module"], request["function"]))
    args = request.get("args", [])
    form = request.get("form", "positional")
    if form == "loop_iteration":
        return verdict(awaited(function(LoopIteration(args[0] if args else {}))))
    if form == "keywords":
        kwargs = args[0] if args and isinstance(args[0], dict) else {}
        return awaited(function(**taken(function, kwargs)))
    return awaited(function(*args, **taken(function, request.get("kwargs", {}))))


def handle(request):
    if request["op"] == "signatures":
        module = load(request["module"])
        return {
            name: parameters(value)
            for name, value in vars(module).items()
            if inspect.isfunction(value) and not name.startswith("_")
            and getattr(value, "__module__", None) == module.__name__
        }
    if "run" in request:
        for old in request.get("forget", []):
            states.pop(old, None)
        kept = states.setdefault(request["run"], {})
        fresh = request.get("fresh", {})
        kept.update(fresh)
        fields = {}
        for name in request.get("held", []):
            if name not in kept:
                raise LookupError("state field %r was never sent to this process" % name)
            fields[name] = kept[name]
        fields.update(fresh)
        fields.update(request.get("kwargs", {}))
        request["kwargs"] = fields
    sys.stderr.secrets = request.get("mask") or []
    try:
        return call(request)
    finally:
        sys.stdout.flush()


HARNESS_DIRS = (os.path.dirname(importlib.__file__),)
MOST_LINES = 40


def user_frames(summary, here):
    """`summary` with the harness's and the import machinery's frames left
    out, and the bundle's files named by their path in the bundle."""
    def shown(path):
        if path and os.path.isabs(path) and path.startswith(here + os.sep):
            return os.path.relpath(path, here)
        return path
    summary.stack = traceback.StackSummary.from_list([
        traceback.FrameSummary(shown(frame.filename), frame.lineno, frame.name,
                               line=frame.line, lookup_line=False)
        for frame in summary.stack
        if not frame.filename.startswith("<")
        and not frame.filename.startswith(HARNESS_DIRS)
    ])
    if getattr(summary, "filename", None):
        summary.filename = shown(summary.filename)
    for chained in (summary.__cause__, summary.__context__):
        if chained is not None:
            user_frames(chained, here)


def user_traceback(raised):
    """The traceback of what user code raised, its frames only: the whole
    of it when short, else its start and its last lines."""
    summary = traceback.TracebackException.from_exception(raised)
    user_frames(summary, os.getcwd())
    lines = "".join(summary.format()).rstrip().splitlines()
    if len(lines) > MOST_LINES:
        cut = len(lines) - MOST_LINES + 1
        lines = lines[:1] + ["  ... (%d lines left out)" % cut] + lines[-(MOST_LINES - 2):]
    return "\n".join(lines)


def main():
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = {"id": request["id"], "ok": handle(request)}
            try:
                text = json.dumps(answer)
            except (TypeError, ValueError) as error:
                raise TypeError("the function returned a value that is not JSON: %s" % error)
        except BaseException as raised:
            error = user_traceback(raised)
            for secret in request.get("mask") or []:
                error = error.replace(secret, "***")
            answer = {"id": request.get("id"), "error": error}
            text = json.dumps(answer)
        protocol.write(text + "\n")


main()
