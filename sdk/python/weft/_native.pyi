"""Type stubs of `weft._native`, the SDK's Rust core (sdk/python/native).
Users reach it through `weft.GraphBundle`, `weft.Worker` and
`weft.Team`; these stubs are for type checkers."""

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Coroutine, Optional

from .team import Message

def bundle_file(path: str, allow_outside_links: bool = False) -> tuple[str, list[tuple[str, bytes, int]]]:
    """The graph file at `path` and the files it names: `(graph_path,
    [(path, content, mode)])`. Raises `weft.GraphInvalid` or
    `weft.BundleError`."""

class Worker:
    """The Rust worker, hosting only what is registered."""

    def __init__(
        self,
        url: str,
        name: str,
        slots: int,
        labels: list[tuple[str, str]],
        token: Optional[str] = None,
        ca: Optional[str] = None,
    ) -> None: ...
    def handler(
        self,
        name: str,
        function: Callable[..., Any],
        submit: Optional[Callable[[Coroutine[Any, Any, Any]], Future[Any]]] = None,
    ) -> None: ...
    def tool(
        self,
        name: str,
        description: str,
        parameters: dict[str, Any],
        function: Callable[..., Any],
        submit: Optional[Callable[[Coroutine[Any, Any, Any]], Future[Any]]] = None,
    ) -> None: ...
    def function(self, name: str, function: Callable[..., Any]) -> None: ...
    def stop(self) -> None: ...
    def run(self) -> None: ...

class TeamSeat:
    """A `teammates: true` step's seat in its team."""

    @property
    def me(self) -> str: ...
    @property
    def members(self) -> list[str]: ...
    def send(self, to: str, content: Any, timeout: float) -> None: ...
    def inbox(self) -> list[Message]: ...
    def recv(self, timeout: float) -> Optional[Message]: ...

class Done:
    """A submitted coroutine's done callback."""

    def __call__(self, future: Future[Any]) -> None: ...
