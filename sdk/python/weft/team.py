"""Teammates in a Python handler: what a `teammates: true` step of a map
item knows of its team, and how it talks to it.

The coordinator holds every inbox. A flagged step starts with its identity
(`MAP/INDEX`), the members and its unread messages; messages sent to it
while it runs arrive too. `send` returns once the coordinator has taken
the message (or raises `TeamError` with why it did not). When the step
ends, the worker reports which messages it read; the coordinator keeps
the rest for the item's next flagged step. The worker's side of this is
Weft's Rust worker (`weft._native`); this class is its Python face.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Optional


class TeamError(Exception):
    """A message that was not sent: not a member, content that is not
    JSON, the coordinator's refusal, or a connection that ended."""


@dataclass(frozen=True)
class Message:
    """A teammate's message: who sent it, what, and its number in the
    inbox."""

    sender: str
    content: Any
    seq: int


class Team:
    """A flagged step's team: `me`, `members`, and the inbox."""

    def __init__(self, seat: Any) -> None:
        self._seat = seat
        self.me: str = seat.me
        self.members: list[str] = list(seat.members)

    def send(self, to: str, content: Any, timeout: float = 30.0) -> None:
        """Sends `content` (any JSON value) to the member `to`; returns once
        the coordinator has taken it."""
        self._seat.send(to, content, timeout)

    def inbox(self) -> list[Message]:
        """Every message that has arrived, in arrival order, without
        waiting. Reading takes them."""
        return self._seat.inbox()

    def recv(self, timeout: float) -> Optional[Message]:
        """The next message, waiting up to `timeout` seconds; None if none
        came."""
        return self._seat.recv(timeout)

    async def asend(self, to: str, content: Any, timeout: float = 30.0) -> None:
        """`send`, for an `async` handler."""
        await asyncio.to_thread(self.send, to, content, timeout)

    async def arecv(self, timeout: float) -> Optional[Message]:
        """`recv`, for an `async` handler."""
        return await asyncio.to_thread(self.recv, timeout)
