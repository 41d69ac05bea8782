"""A graph and the files it names, ready to submit, so workers need no
shared file system.

From a file: the graph, validated, and every regular file inside its
directory that the graph names: a script's `run` elements and `script:`
that name files beside the graph, a subgraph's `graph:` (read for the
files it names in turn), the `functions:` sidecar, a `module:function`
import path's module (`module.py` or `module/__init__.py`),
`nodes/<id>.py`, `agents/NAME.md` for an `agent: NAME` that `agents:` does
not define, and the files a knowledge base's `sources` globs match. The
bundling is the `weft` command line's own (Weft's Rust core, in
`weft._native`): a graph bundles the same files, modes and bytes from
Python as from `weft run`. A graph that does not validate raises
`GraphInvalid` with its findings before anything is sent. A file whose
real path (through symbolic links) is outside the directory is refused
unless `allow_outside_links`, so a link such as
`scripts/x.py -> ~/.aws/credentials` never uploads what it points at.
Modes keep at most 0o755.

From a dict: the graph as a JSON file, alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Union

from . import _native
from .errors import WeftError


class BundleError(WeftError):
    """A graph file or a file it names could not be read or may not be sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "bundle")


@dataclass
class GraphBundle:
    """The graph's path among `files`, and `(path, content, mode)` of each."""

    graph_path: str
    files: list[tuple[str, bytes, int]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, graph: dict[str, Any], name: str = "graph.json") -> "GraphBundle":
        """A graph built in code, as a JSON graph file."""
        text = json.dumps(graph).encode()
        return cls(name, [(name, text, 0o644)])

    @classmethod
    def from_text(cls, name: str, text: str) -> "GraphBundle":
        """One graph file's text (YAML or JSON, by `name`'s extension)."""
        return cls(name, [(name, text.encode(), 0o644)])

    @classmethod
    def from_file(cls, path: Union[str, os.PathLike[str]], allow_outside_links: bool = False) -> "GraphBundle":
        """A graph file and the files it names (see the module's docs)."""
        graph_path, files = _native.bundle_file(os.fspath(path), allow_outside_links)
        return cls(graph_path, files)
