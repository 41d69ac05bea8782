"""Teammates in a Python handler: what a `teammates: true` step of a map
item knows of its team, and how it talks to it.

The coordinator holds every inbox. A flagged step starts with its identity
(`MAP/INDEX`), the members and its unread messages; messages sent to it
while it runs arrive too. `send` returns once the coordinator has taken
the message (or raises `TeamError` with why it did not). When the step
ends, the worker reports which messages it read; the coordinator keeps
the rest for the item's next flagged step.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional


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


class Acks:
    """Answers to sends, by send id, shared by a session's tasks."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[threading.Event, list[Optional[str]]]] = {}

    def expect(self) -> tuple[int, threading.Event, list[Optional[str]]]:
        send_id = next(self._ids)
        event, answer = threading.Event(), [None]
        with self._lock:
            self._waiting[send_id] = (event, answer)
        return send_id, event, answer

    def answered(self, send_id: int, refusal: Optional[str]) -> None:
        with self._lock:
            waiter = self._waiting.pop(send_id, None)
        if waiter is not None:
            waiter[1][0] = refusal
            waiter[0].set()


class Team:
    """A flagged step's team: `me`, `members`, and the inbox."""

    def __init__(self, me: str, members: list[str], inbox: list[Message],
                 send: Callable[[int, str, str], None], acks: Acks) -> None:
        self.me = me
        self.members = list(members)
        self._arrived: "queue.Queue[Message]" = queue.Queue()
        for message in inbox:
            self._arrived.put(message)
        self._read: list[int] = []
        self._send = send
        self._acks = acks

    def deliver(self, message: Message) -> None:
        """A message sent to this step while it runs."""
        self._arrived.put(message)

    def read(self) -> list[int]:
        """The numbers of the messages the step took."""
        return list(self._read)

    def send(self, to: str, content: Any, timeout: float = 30.0) -> None:
        """Sends `content` (any JSON value) to the member `to`; returns once
        the coordinator has taken it."""
        if to not in self.members:
            raise TeamError(f"'{to}' is not a member of this team (members: {', '.join(self.members)})")
        try:
            text = json.dumps(content)
        except (TypeError, ValueError) as error:
            raise TeamError(f"the message does not serialize: {error}") from None
        send_id, answered, answer = self._acks.expect()
        self._send(send_id, to, text)
        if not answered.wait(timeout):
            raise TeamError("the coordinator did not answer the send (its connection ended)")
        if answer[0]:
            raise TeamError(answer[0])

    def inbox(self) -> list[Message]:
        """Every message that has arrived, in arrival order, without
        waiting. Reading takes them."""
        taken = []
        while True:
            try:
                message = self._arrived.get_nowait()
            except queue.Empty:
                break
            self._read.append(message.seq)
            taken.append(message)
        return taken

    def recv(self, timeout: float) -> Optional[Message]:
        """The next message, waiting up to `timeout` seconds; None if none
        came."""
        try:
            message = self._arrived.get(timeout=timeout)
        except queue.Empty:
            return None
        self._read.append(message.seq)
        return message

    async def asend(self, to: str, content: Any, timeout: float = 30.0) -> None:
        """`send`, for an `async` handler."""
        await asyncio.to_thread(self.send, to, content, timeout)

    async def arecv(self, timeout: float) -> Optional[Message]:
        """`recv`, for an `async` handler."""
        return await asyncio.to_thread(self.recv, timeout)
