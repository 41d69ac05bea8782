"""A graph and the files it names, ready to submit, so workers need no
shared file system.

From a file: the graph, and every regular file inside its directory that
the graph names: a relative path anywhere in it (a script's `run`
elements, `script:`, a subgraph's `graph:`, the `functions:` sidecar), a
`module:function` import path's module (`module.py` or
`module/__init__.py`), `nodes/<id>.py`, and `agents/NAME.md` for an
`agent: NAME` that `agents:` does not define, and the files a knowledge
base's `sources` globs match (`*` and `?` within a directory, `**` across
any number, `{a,b}` and `[...]` as written; hidden files and directories
never). Embedded graphs are read for
the files they name in turn. A file whose real path (through symbolic
links) is outside the directory is refused unless `allow_outside_links`,
so a link such as `scripts/x.py -> ~/.aws/credentials` never uploads what
it points at. Modes keep at most 0o755.

From a dict: the graph as a JSON file, alone.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, Union

import yaml

from .errors import WeftError

MODE_MASK = 0o755

_IMPORT_PATH = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):[A-Za-z_][A-Za-z0-9_]*$")


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
        path = Path(path)
        directory = path.parent
        root = directory.resolve()
        name = path.name
        files = [(name, _read(path), 0o644)]
        for relative in _named_files(directory, name):
            full = directory / relative
            real = full.resolve()
            if not real.is_relative_to(root) and not allow_outside_links:
                raise BundleError(
                    f"'{relative}' resolves to {real}, outside the graph's directory; "
                    "it is not sent to the cluster (pass allow_outside_links=True to send it anyway)"
                )
            mode = stat.S_IMODE(full.stat().st_mode) & MODE_MASK
            files.append((relative, _read(full), mode))
        return cls(name, files)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise BundleError(f"cannot read '{path}': {error.strerror or error}") from None


def _load(path: Path) -> Any:
    try:
        return yaml.safe_load(_read(path).decode())
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise BundleError(f"'{path}' is not a YAML or JSON graph: {error}") from None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _inside(text: str) -> str | None:
    """`text` as a normalised relative path that stays inside, or None."""
    if not text or "\n" in text or text.startswith("/") or "\0" in text:
        return None
    parts: list[str] = []
    for part in PurePosixPath(text).parts:
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts) if parts else None


def _glob(source: str) -> re.Pattern[str]:
    """A knowledge source glob as a regular expression over paths relative
    to the graph's directory, matching as the Rust bundler's does."""
    if source.startswith("./"):
        source = source[2:]
    out: list[str] = []
    i = 0
    depth = 0
    while i < len(source):
        c = source[i]
        if source.startswith("**/", i) and (i == 0 or source[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
            continue
        if source.startswith("**", i) and i + 2 == len(source) and (i == 0 or source[i - 1] == "/"):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\" and i + 1 < len(source):
            i += 1
            out.append(re.escape(source[i]))
        elif c == "[":
            end = source.find("]", i + 2)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = source[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


def _files_under(directory: Path) -> list[str]:
    """Files under `directory` by relative path: hidden ones left out,
    symbolic links to directories not followed."""
    found: list[str] = []
    pending = [(directory, "")]
    while pending:
        path, relative = pending.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            joined = f"{relative}/{entry.name}" if relative else entry.name
            if entry.is_dir(follow_symlinks=False):
                pending.append((Path(entry.path), joined))
            elif entry.is_file():
                found.append(joined)
    return sorted(found)


def _named_files(directory: Path, top: str) -> list[str]:
    named: list[str] = []
    graphs = [top]
    seen = {top}
    while graphs:
        at = graphs.pop()
        base = PurePosixPath(at).parent
        document = _load(directory / at)
        if not isinstance(document, dict):
            continue
        nodes = document.get("nodes")
        nodes = nodes if isinstance(nodes, dict) else {}
        # Its subgraph nodes' graphs, read in turn for the files they name.
        embedded = {
            _inside(str(base / node["graph"]))
            for node in nodes.values()
            if isinstance(node, dict) and node.get("kind") == "subgraph" and isinstance(node.get("graph"), str)
        }
        candidates: list[str] = []
        for text in _strings(document):
            match = _IMPORT_PATH.match(text.strip())
            if match:
                module = match.group(1).replace(".", "/")
                candidates += [f"{module}.py", f"{module}/__init__.py"]
            candidates.append(text)
        candidates += [f"nodes/{node_id}.py" for node_id in nodes]
        # Named agents that `agents:` does not define live in agents/NAME.md.
        defined = document.get("agents")
        defined = defined if isinstance(defined, dict) else {}
        listed = document.get("nodes")
        for node in listed.values() if isinstance(listed, dict) else listed if isinstance(listed, list) else []:
            name = node.get("agent") if isinstance(node, dict) and node.get("kind") == "agent" else None
            if isinstance(name, str) and name not in defined:
                candidates.append(f"agents/{name}.md")
        knowledge = document.get("knowledge")
        for base_def in knowledge.values() if isinstance(knowledge, dict) else []:
            sources = base_def.get("sources") if isinstance(base_def, dict) else None
            sources = [sources] if isinstance(sources, str) else sources if isinstance(sources, list) else []
            patterns = [_glob(source) for source in sources if isinstance(source, str)]
            graph_dir = directory / base
            for relative in _files_under(graph_dir):
                if any(pattern.fullmatch(relative) for pattern in patterns):
                    candidates.append(relative)
        for candidate in candidates:
            # Scripts run from the bundle's root; the rest is relative to
            # the graph that names it.
            for relative in dict.fromkeys((_inside(candidate), _inside(str(base / candidate)))):
                if relative is None or relative in seen or not (directory / relative).is_file():
                    continue
                seen.add(relative)
                named.append(relative)
                if relative in embedded:
                    graphs.append(relative)
    return named
