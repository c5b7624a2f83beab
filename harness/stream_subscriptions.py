"""What follows a stream through the caller's one reader: followers, marks, subscriptions.

A :class:`Subscription` is one :class:`Follower` of one stream key from one position
(with, optionally, a :class:`Mark` it owes Redis); ``harness.stream_reader`` groups the
subscriptions of a key into one followed stream (``harness.followed_keys``) and hands them
its entries in order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

StreamEntry = tuple[str, dict[str, str]]
"""One entry of a task's Redis Stream: its id and its fields."""


class Unsubscriber(Protocol):
    """What a subscription is closed through (the reader that serves it)."""

    def _unsubscribe(self, subscription: Subscription) -> None: ...


def comes_after(entry_id: str, cursor: str) -> bool:
    """Whether stream entry ``entry_id`` comes after ``cursor`` (both ``ms-seq`` ids)."""
    first, _, second = entry_id.partition("-")
    before, _, rest = cursor.partition("-")
    return (int(first), int(second or 0)) > (int(before), int(rest or 0))


@dataclass(frozen=True, slots=True)
class Follower:
    """What receives one subscription's entries and its end. The reader calls these on its
    loop and never waits for them: each returns at once."""

    entries: Callable[[Sequence[StreamEntry]], None]
    """The next entries, in order, never empty. Raising fails the subscription."""
    failed: Callable[[BaseException], None]
    """The stream cannot be read (its key is not a stream), or ``entries`` raised; the
    subscription has ended."""
    lost: Callable[[float, BaseException], None]
    """Redis was unreachable for ``window`` seconds (how long, the last error); the
    subscription has ended."""
    window: float = 60.0
    """Seconds of Redis unreachable before the subscription is lost (0: at once)."""


@dataclass(frozen=True, slots=True)
class Mark:
    """A script call a subscription owes Redis: ``EVALSHA sha len(keys) *keys``, pipelined
    in front of the reader's reads until it lands."""

    sha: str
    keys: tuple[str, ...]
    run: Callable[[], Awaitable[object]]
    """The same call on a pooled connection, loading the script if Redis lost it."""
    what: str
    """Names the call in the log."""


class Subscription:
    """One follower of one stream key, from one position; ``close()`` ends it."""

    __slots__ = ("_reader", "closed", "follower", "joined", "key", "last", "mark")

    def __init__(
        self,
        reader: Unsubscriber,
        key: str,
        follower: Follower,
        after: str,
        joined: float,
        mark: Mark | None,
    ) -> None:
        self._reader = reader
        self.key = key
        self.follower = follower
        self.last = after
        """The id of the last entry handed to the follower (or the one it started after)."""
        self.joined = joined
        self.mark = mark
        self.closed = False

    def close(self) -> None:
        """Stop following (idempotent): no callback of the follower runs after it."""
        self._reader._unsubscribe(self)


class Inbox:
    """The buffer between the reader and one ``follow()`` consumer."""

    def __init__(self, capacity: int) -> None:
        self.reads: deque[tuple[StreamEntry, ...]] = deque()
        self.error: BaseException | None = None
        self.paused = False
        self.subscription: Subscription | None = None
        self.follower = Follower(self._entries, self._failed, self._lost, window=0.0)
        self._capacity = max(1, capacity)
        self._wake = asyncio.Event()

    def _entries(self, entries: Sequence[StreamEntry]) -> None:
        self.reads.append(tuple(entries))
        if len(self.reads) >= self._capacity:
            self.paused = True
            self.close()
        self._wake.set()

    def _failed(self, error: BaseException) -> None:
        self.error = error
        self._wake.set()

    def _lost(self, seconds: float, error: BaseException) -> None:
        self._failed(error)

    async def wait(self, seconds: float) -> bool:
        """Whether something arrived within ``seconds``."""
        self._wake.clear()
        try:
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        if self.subscription is not None:
            self.subscription.close()


__all__ = [
    "Follower",
    "Inbox",
    "Mark",
    "StreamEntry",
    "Subscription",
    "comes_after",
]
