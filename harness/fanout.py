"""Independent bounded subscriptions with exact, positioned loss accounting.

A pure asyncio primitive: every subscriber has its own buffer of at most ``capacity``
entries. When a buffer is full, newly published items are dropped and counted in one
gap entry at the tail, so a subscriber learns exactly how many items it missed and
where. The final item (the terminal event) is kept outside the buffers and is always
delivered last, exactly once, also to subscribers that arrive after closing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class _Dropped:
    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 1


class _Buffer(Generic[T]):
    __slots__ = ("closed", "entries", "wake")

    def __init__(self) -> None:
        self.entries: deque[T | _Dropped] = deque()
        self.wake = asyncio.Event()
        self.closed = False


class BoundedFanout(Generic[T]):
    def __init__(self, capacity: int, gap: Callable[[int], T]) -> None:
        if capacity < 2:
            raise ValueError("capacity must leave room for one item and one gap marker")
        self._capacity = capacity
        self._gap = gap
        self._buffers: set[_Buffer[T]] = set()
        self._closed = False
        self._final: T | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    def publish(self, item: T) -> None:
        if self._closed:
            return
        for buffer in self._buffers:
            entries = buffer.entries
            tail = entries[-1] if entries else None
            if isinstance(tail, _Dropped) and len(entries) >= self._capacity - 1:
                tail.count += 1
            elif len(entries) < self._capacity - 1:
                entries.append(item)
            else:
                entries.append(_Dropped())
            buffer.wake.set()

    def close(self, final: T | None = None) -> None:
        """Stop accepting items; ``final`` is delivered last to every subscriber."""
        if self._closed:
            return
        self._closed = True
        self._final = final
        for buffer in self._buffers:
            buffer.closed = True
            buffer.wake.set()
        self._buffers.clear()

    def subscribe(self) -> AsyncIterator[T]:
        """Register now: every item published after this call is delivered or counted."""
        buffer = _Buffer[T]()
        if self._closed:
            buffer.closed = True
        else:
            self._buffers.add(buffer)
        return self._drain(buffer)

    async def _drain(self, buffer: _Buffer[T]) -> AsyncIterator[T]:
        try:
            while True:
                if buffer.entries:
                    entry = buffer.entries.popleft()
                    yield self._gap(entry.count) if isinstance(entry, _Dropped) else entry
                elif buffer.closed:
                    if self._final is not None:
                        yield self._final
                    return
                else:
                    buffer.wake.clear()
                    await buffer.wake.wait()
        finally:
            self._buffers.discard(buffer)
