"""Batch a run's stream entries and append them under its lease, in order.

Emitting never blocks the graph: entries queue in memory and one background flusher
appends everything pending in a single fenced script call, so a burst of token deltas
costs a few round trips, not one per token.
"""

from __future__ import annotations

import asyncio
import logging

from wire.store import RecordStore

log = logging.getLogger(__name__)

_BATCH = 512


class EventSink:
    def __init__(self, store: RecordStore, session_id: str, task_id: str, lease: str) -> None:
        self._store = store
        self._session_id = session_id
        self._task_id = task_id
        self._lease = lease
        self._pending: list[tuple[str, str, str]] = []
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        self.lease_lost = False
        self.task_settled = False

    def start(self) -> None:
        self._flusher = asyncio.create_task(self._flush_forever())

    def emit(self, kind: str, tag: str, payload: str) -> None:
        if self.lease_lost or self.task_settled:
            return
        self._pending.append((kind, tag, payload))
        self._wake.set()

    async def drain(self) -> None:
        """Write everything emitted so far; the flusher ends once nothing is pending.

        The flusher is never cancelled mid-append, so no batch is half-known."""
        self._closing = True
        self._wake.set()
        if self._flusher is not None:
            await self._flusher
        else:
            await self._write_pending()

    async def _flush_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._write_pending()
            if self._closing and not self._pending:
                return

    async def _write_pending(self) -> None:
        async with self._lock:
            while self._pending and not (self.lease_lost or self.task_settled):
                batch = self._pending[:_BATCH]
                del self._pending[:_BATCH]
                written = await self._store.append(
                    self._session_id, self._task_id, self._lease, batch
                )
                if written < 0:
                    log.warning("task %s lost its session lease; events dropped", self._task_id)
                    self.lease_lost = True
                elif written == 0:
                    self.task_settled = True
            if self.lease_lost or self.task_settled:
                self._pending.clear()
