"""Batch a run's stream entries and append them under its lease, in order.

Emitting never blocks the graph: entries queue in memory and one background flusher
appends everything pending in a single fenced script call, so a burst of token deltas
costs a few round trips, not one per token.

An append that fails on a lost connection (Redis restarting) is retried with backoff,
in order, and exactly once: batches are numbered, and the append script records the last
batch it wrote for this lease, so resending a batch whose reply was lost appends nothing.
The fence check stays with the script: a retry is refused (-1) when the lease is no
longer this run's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from wire.backoff import CONNECTION_ERRORS, Outage

from .append_batcher import Appender

log = logging.getLogger(__name__)

_BATCH = 512

_Entry = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Withheld:
    """Entries a run emitted that are not written yet, numbered as its next batch."""

    batch: int
    entries: tuple[_Entry, ...]


class EventSink:
    retry_window: float = 60.0
    """Seconds a failing append is retried; then the entries are dropped and the sink
    counts its lease as lost (a lease that could not be renewed that long has lapsed)."""

    def __init__(self, store: Appender, session_id: str, task_id: str, lease: str) -> None:
        """``store``: where the batches go (the record store, or the process's
        ``AppendBatcher``, which pipelines every run's appends)."""
        self._store = store
        self._session_id = session_id
        self._task_id = task_id
        self._lease = lease
        self._pending: list[_Entry] = []
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        self._withholding = False
        self._batches = 0  # batches sent so far; the next one is numbered _batches + 1
        self.lease_lost = False
        self.task_settled = False

    def start(self) -> None:
        self._flusher = asyncio.create_task(self._flush_forever())

    def emit(self, kind: str, tag: str, payload: str) -> None:
        if self.lease_lost or self.task_settled or self._withholding:
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

    async def withhold(self) -> Withheld | None:
        """End the flusher once the batch in flight (if any) is written, and hand over the
        rest unwritten, numbered as the next batch: the run's last steps send it in one
        round trip with the settle (``RecordStore.finish``). ``None``: nothing is left to
        write (or nothing may be: the lease was lost, the task settled elsewhere). Emitting
        afterwards writes nothing."""
        self._withholding = self._closing = True
        self._wake.set()
        if self._flusher is not None:
            await self._flusher
        async with self._lock:
            rest, self._pending = self._pending, []
            if not rest or self.lease_lost or self.task_settled:
                return None
            self._batches += 1
            return Withheld(self._batches, tuple(rest))

    async def send(self, withheld: Withheld) -> None:
        """Write a withheld batch under its own number (resending a batch that landed
        appends nothing), as the flusher would have."""
        async with self._lock:
            if self.lease_lost or self.task_settled:
                return
            self.record(await self._append(withheld.entries, withheld.batch))

    def record(self, written: int) -> None:
        """The result of an append of this run's events (see the append script)."""
        if written < 0:
            log.warning("task %s lost its session lease; events dropped", self._task_id)
            self.lease_lost = True
        elif written == 0:
            self.task_settled = True

    async def _flush_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._write_pending()
            if self._closing and (not self._pending or self._withholding):
                return

    async def _write_pending(self) -> None:
        async with self._lock:
            while self._pending and not (self.lease_lost or self.task_settled or self._withholding):
                batch = self._pending[:_BATCH]
                # The batch leaves the queue only once its fate is known: entries emitted
                # meanwhile queue behind it, so the order holds across retries.
                self._batches += 1
                written = await self._append(batch, self._batches)
                del self._pending[: len(batch)]
                self.record(written)
            if self.lease_lost or self.task_settled:
                self._pending.clear()

    async def _append(self, batch: Sequence[_Entry], number: int) -> int:
        """Append ``batch`` exactly once; the script's result (the number appended, 0 if
        the task is terminal, -1 if the lease is not this run's, or if Redis stayed
        unreachable for ``retry_window``: a lease that could not be renewed that long has
        lapsed)."""
        outage: Outage | None = None  # made on the first failure: appends rarely fail
        while True:
            try:
                written = await self._store.append(
                    self._session_id, self._task_id, self._lease, batch, number
                )
            except CONNECTION_ERRORS as error:
                if outage is None:
                    outage = Outage(
                        f"task {self._task_id}: appending events",
                        window=timedelta(seconds=self.retry_window),
                        logger=log,
                    )
                if outage.exhausted():
                    log.error(
                        "task %s: Redis unreachable for %.0f s; events dropped",
                        self._task_id,
                        outage.seconds(),
                    )
                    return -1
                await outage.back_off(error)
                continue
            if outage is not None:
                outage.recovered()
            return written
