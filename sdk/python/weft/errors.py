"""What can go wrong, as exceptions named after what happened.

Every exception is a `WeftError` carrying the coordinator's message and
the name of its gRPC status code (`not_found`, …); `GraphInvalid` also
carries the findings.
"""

from __future__ import annotations


class WeftError(Exception):
    """A request the coordinator refused or could not answer."""

    def __init__(self, message: str, code: str = "unknown") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class GraphInvalid(WeftError):
    """The graph (or a graph it embeds) is invalid; `findings` lists why,
    one line each (`error: …` or `warning: …`)."""

    def __init__(self, message: str, findings: list[str]) -> None:
        super().__init__(message, "invalid_argument")
        self.findings = findings


class InvalidArgument(WeftError):
    """The request is malformed: an input that does not fit the graph's
    state, an answer that does not fit its node, a bad value."""


class RunNotFound(WeftError):
    """No such run, or one of a namespace the caller does not see."""


class Unauthenticated(WeftError):
    """The coordinator wants an identity: none was sent, or it is unknown."""


class PermissionDenied(WeftError):
    """The caller's role is too weak, or it is not among a node's approvers."""


class Rejected(WeftError):
    """The run's state does not allow the request (answering a node that
    does not wait, retrying a run that has not failed)."""


class Unavailable(WeftError):
    """The coordinator cannot be reached, or has no leader right now."""


class TooLarge(WeftError):
    """A graph, input or answer is over one of the coordinator's limits."""


# gRPC's status codes by number, for the errors the native core reports.
_BY_NUMBER: dict[int, tuple[type[WeftError], str]] = {
    3: (InvalidArgument, "invalid_argument"),
    5: (RunNotFound, "not_found"),
    7: (PermissionDenied, "permission_denied"),
    8: (TooLarge, "resource_exhausted"),
    9: (Rejected, "failed_precondition"),
    14: (Unavailable, "unavailable"),
    16: (Unauthenticated, "unauthenticated"),
}


def of_status(code: int, message: str, graph: bool = False) -> WeftError:
    """The exception for a gRPC status the native core received, by its
    code's number; `graph`: the request carried a graph, so an invalid
    argument that is not about the input is `GraphInvalid`, its findings
    the message's `error: …` and `warning: …` lines."""
    if graph and code == 3 and not message.startswith("invalid input"):
        lines = [line.strip() for line in message.splitlines() if line.strip()]
        findings = [line for line in lines if line.startswith(("error:", "warning:"))] or lines
        return GraphInvalid(message, findings)
    kind, name = _BY_NUMBER.get(code, (WeftError, "unknown"))
    return kind(message, name)
