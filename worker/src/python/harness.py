"""Weft's Python host: serves function calls as JSON lines (issue 13).

Requests arrive one per line on stdin, answers leave one per line on the
protocol pipe (the original stdout). Whatever user code prints -- print()
or a C library writing to fd 1 -- goes to stderr instead, so it can never
corrupt the protocol.

Requests:
  {"id": N, "op": "call", "module": M, "function": F, "args": [...], "kwargs": {...}}
  {"id": N, "op": "signatures", "module": M}
M is a path to a .py file (imported by path under a private name, so two
bundles' helpers.py never collide) or a dotted module name (imported from
the working directory, then installed packages).
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
sys.stdout = sys.stderr

modules = {}


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


def handle(request):
    module = load(request["module"])
    if request["op"] == "signatures":
        return {
            name: parameters(value)
            for name, value in vars(module).items()
            if inspect.isfunction(value) and not name.startswith("_")
            and getattr(value, "__module__", None) == module.__name__
        }
    function = getattr(module, request["function"], None)
    if function is None or not callable(function):
        raise LookupError("%s has no function %r" % (request["module"], request["function"]))
    return function(*request.get("args", []), **request.get("kwargs", {}))


def main():
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = {"id": request["id"], "ok": handle(request)}
            text = json.dumps(answer)
        except BaseException:
            lines = traceback.format_exc().strip().splitlines()
            answer = {"id": request.get("id"), "error": "\n".join(lines[-6:])}
            text = json.dumps(answer)
        protocol.write(text + "\n")


main()
