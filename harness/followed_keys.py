"""The keys a stream reader follows, each at its position, and the one ``XREAD`` over them.

The packed command is cached: every followed key holds a slot in its keys and ids, kept
as encoded bulk strings, so a read costs joining them (only a stream that moved has its
id encoded again), not encoding every argument again. A key no longer followed gives its
slot to the last key.
"""

from __future__ import annotations

from datetime import timedelta

from .stream_connection import bulk
from .stream_subscriptions import Subscription

COUNT = 1024
"""Entries per stream and read, at most."""
BLOCK = timedelta(seconds=2)
"""How long a read waits for entries; below redis-py's socket timeout (5 s)."""

_READ_HEAD = b"".join(
    bulk(part)
    for part in ("XREAD", "COUNT", str(COUNT), "BLOCK", str(int(BLOCK.total_seconds() * 1000)))
) + bulk("STREAMS")
_READ_ARGUMENTS = 6


class FollowedStream:
    """One followed key: the id its next read starts after, and its subscriptions."""

    __slots__ = ("changed", "cursor", "slot", "subscriptions")

    def __init__(self, cursor: str, slot: int, changed: int) -> None:
        self.cursor = cursor
        self.slot = slot
        """Its position in the packed command's keys and ids."""
        self.changed = changed
        """The last read sent when its cursor moved back (or it was added): that read's
        reply for this key is not applied (the next read asks from the cursor)."""
        self.subscriptions: list[Subscription] = []


class FollowedKeys:
    """Every followed key's stream, in the packed command's order."""

    def __init__(self) -> None:
        self._streams: dict[str, FollowedStream] = {}
        self._order: list[str] = []
        self._key_bulks: list[bytes] = []
        self._id_bulks: list[bytes] = []

    def __len__(self) -> int:
        return len(self._streams)

    def get(self, key: str) -> FollowedStream | None:
        return self._streams.get(key)

    def keys(self) -> tuple[str, ...]:
        """The followed keys, in the packed command's order."""
        return tuple(self._order)

    def subscriptions(self) -> list[Subscription]:
        """Every subscription of every followed key, as they are now."""
        return [s for stream in self._streams.values() for s in stream.subscriptions]

    def add(self, key: str, cursor: str, changed: int) -> FollowedStream:
        """Follow ``key`` from ``cursor``; ``changed``: the last read sent so far."""
        stream = FollowedStream(cursor, len(self._order), changed)
        self._streams[key] = stream
        self._order.append(key)
        self._key_bulks.append(bulk(key))
        self._id_bulks.append(bulk(cursor))
        return stream

    def move(self, stream: FollowedStream, cursor: str) -> None:
        """The next read of ``stream`` starts after ``cursor``."""
        stream.cursor = cursor
        self._id_bulks[stream.slot] = bulk(cursor)

    def remove(self, key: str, stream: FollowedStream) -> None:
        """Stop following ``key`` (whose stream is ``stream``)."""
        del self._streams[key]
        slot, last = stream.slot, len(self._order) - 1
        if slot != last:  # the last key takes its place
            moved = self._order[last]
            self._order[slot] = moved
            self._key_bulks[slot] = self._key_bulks[last]
            self._id_bulks[slot] = self._id_bulks[last]
            self._streams[moved].slot = slot
        self._order.pop()
        self._key_bulks.pop()
        self._id_bulks.pop()

    def read_command(self) -> bytes:
        """``XREAD COUNT .. BLOCK .. STREAMS k1 k2 ... id1 id2 ...``, packed."""
        arguments = _READ_ARGUMENTS + 2 * len(self._order)
        return b"".join((b"*%d\r\n" % arguments, _READ_HEAD, *self._key_bulks, *self._id_bulks))


__all__ = ["BLOCK", "COUNT", "FollowedKeys", "FollowedStream"]
