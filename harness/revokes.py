"""A caller's revoke broadcasts: one thread, batched.

A revoke is best effort (the durable cancel flag is what stops a run, see
``harness.task``); it only saves a worker from taking a message it would discard. Each
broadcast goes through Celery's control API, which is blocking and checks a kombu
connection out of the app's pool per calling thread. Sent from a thread per cancel, a
burst of cancels opened a broker connection per thread (31 for 300 cancels at once);
here every revoke waiting while one is being sent joins the next broadcast, which
carries all of their ids (Celery's ``revoke`` takes a list), so a caller holds one
broker connection for revokes whatever the burst.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

Broadcast = Callable[[Sequence[str]], object]
"""Sends one revoke of these ids (blocking; ``Celery.control.revoke``)."""


@dataclass
class _Batch:
    ids: list[str] = field(default_factory=list)
    closed: bool = False  # taken by the sending thread: no id joins it any more
    sent: asyncio.Future[None] | None = None


class RevokeBatcher:
    """Revokes sent one broadcast at a time, each carrying every id that waited."""

    def __init__(self, broadcast: Broadcast) -> None:
        self._broadcast = broadcast
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ahp-revoke")
        self._lock = threading.Lock()
        self._open: _Batch | None = None

    async def revoke(self, task_id: str) -> None:
        """Until the broadcast carrying ``task_id`` was sent (raises what it raised)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            batch = self._open
            if batch is None or batch.closed:
                batch = self._open = _Batch()
                batch.sent = loop.run_in_executor(self._executor, self._send, batch)
                batch.sent.add_done_callback(_retrieve)  # its callers may all be gone
            batch.ids.append(task_id)
            sent = batch.sent
        assert sent is not None
        await asyncio.shield(sent)  # a cancelled caller leaves the batch to the others

    def _send(self, batch: _Batch) -> None:
        with self._lock:
            batch.closed = True
            ids = tuple(batch.ids)
        self._broadcast(ids)

    def close(self) -> None:
        """Stop taking revokes; one being sent finishes on its thread."""
        self._executor.shutdown(wait=False)


def _retrieve(sent: asyncio.Future[None]) -> None:
    if not sent.cancelled():
        sent.exception()


__all__ = ["Broadcast", "RevokeBatcher"]
