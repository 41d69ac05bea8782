"""Type stubs of `weft._native`, the SDK's Rust core (sdk/python/native).
Users reach it through `weft.Client`, `weft.aio.Client`,
`weft.GraphBundle`, `weft.Worker` and `weft.Team`; these stubs are for
type checkers."""

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

Done_ = Callable[[Any, Optional[BaseException]], None]
Graph = str | tuple[str, list[tuple[str, bytes, int]]]
Place = Optional[tuple[int, int]]

class Pending:
    """A call begun with `done`: cancelling it stops the call."""

    def cancel(self) -> None: ...

class Feed:
    """A run's events (`(seq, at_unix_ms, body)`) or model output (a
    dict per piece), read one at a time; `None` at the end."""

    def next(self, done: Optional[Done_] = None) -> Any: ...

class Client:
    """`weft_client::Client`. Every call blocks without `done`, else
    returns a `Pending` and hands `(value, exception)` to `done`."""

    def __init__(self, url: str, token: Optional[str] = None, ca: Optional[str] = None) -> None: ...
    def close(self) -> None: ...
    def submit(
        self, graph: Graph, input: dict[str, Any], priority: Optional[str], no_cache: bool, done: Optional[Done_] = None
    ) -> Any: ...
    def validate(self, graph: Graph, done: Optional[Done_] = None) -> Any: ...
    def get(self, run_id: str, omit_state: bool = False, done: Optional[Done_] = None) -> Any: ...
    def list_page(self, limit: int, after: Optional[str] = None, done: Optional[Done_] = None) -> Any: ...
    def wait(self, run_id: str, timeout: Optional[float] = None, done: Optional[Done_] = None) -> Any: ...
    def resume(
        self, run_id: str, node: str, value: Any, comment: Optional[str] = None, done: Optional[Done_] = None
    ) -> Any: ...
    def cancel(self, run_id: str, done: Optional[Done_] = None) -> Any: ...
    def retry(self, run_id: str, done: Optional[Done_] = None) -> Any: ...
    def delete(self, run_id: str, done: Optional[Done_] = None) -> Any: ...
    def fork(self, run_id: str, at: Place, set: dict[str, Any], done: Optional[Done_] = None) -> Any: ...
    def history(self, run_id: str, at: Place, done: Optional[Done_] = None) -> Any: ...
    def events(self, run_id: str, start: int) -> Feed: ...
    def stream(self, run_id: str, start: int) -> Feed: ...
