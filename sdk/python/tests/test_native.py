"""`weft._native`, the SDK's Rust core: its type stubs name what it has,
and the bundler it holds is the `weft` command line's (the suite's
`python_bundles` test compares the files on every example graph)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import weft
from weft import _native


def stubbed() -> dict[str, set[str]]:
    """The stub file's top-level names, each with its members (a class's
    methods and properties)."""
    tree = ast.parse(Path(weft.__file__).with_name("_native.pyi").read_text())
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names[node.name] = set()
        elif isinstance(node, ast.ClassDef):
            names[node.name] = {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
    return names


def test_the_stubs_name_what_the_native_module_has():
    module = {name for name in dir(_native) if not name.startswith("_")}
    stubs = stubbed()
    assert set(stubs) == module
    for name, members in stubs.items():
        found = getattr(_native, name)
        if inspect.isclass(found):
            public = {m for m in vars(found) if not m.startswith("_") or m in ("__init__", "__call__")}
            # A pyo3 class's constructor is `__new__`; its stub says `__init__`.
            public.discard("__init__")
            assert members - {"__init__"} == public, name


def test_an_invalid_graph_file_raises_its_findings_before_anything_is_sent(tmp_path):
    graph = tmp_path / "broken.yaml"
    graph.write_text("nodes:\n  a: {kind: script, start: true}\n")
    with pytest.raises(weft.GraphInvalid) as raised:
        weft.GraphBundle.from_file(graph)
    assert raised.value.findings and all(f.startswith(("error:", "warning:")) for f in raised.value.findings)
    assert any("requires `run: [argv…]`" in f for f in raised.value.findings), raised.value.findings
    with pytest.raises(weft.BundleError, match="cannot read"):
        weft.GraphBundle.from_file(tmp_path / "missing.yaml")
