"""Hand a run back when its worker stops: its events written, its lease freed.

A worker told to stop (SIGTERM, a warm shutdown) cancels its runs; a run whose graph turn
ended unsettled hands its session's lease back, so the requeued delivery is claimed at
once by the next worker and is not counted as lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from .event_sink import EventSink
from .lease import SessionLease

log = logging.getLogger(__name__)


async def hand_back(sink: EventSink, lease: SessionLease, budget: timedelta) -> None:
    """Write the events the run emitted (the worker's stop may have cancelled the flusher
    too: entries it could not write are superseded by the next run anyway) within
    ``budget``, then hand the lease back. Runs to its end even if cancelled again."""
    await _shielded(_hand_back(sink, lease, budget.total_seconds()))


async def _hand_back(sink: EventSink, lease: SessionLease, budget: float) -> None:
    try:
        await asyncio.wait_for(sink.drain(), budget)
    except (Exception, asyncio.CancelledError):
        log.warning("task %s: events not all written while handing back", lease.task_id)
    try:
        await lease.hand_back()
    except Exception:
        log.exception("task %s: the lease could not be handed back", lease.task_id)
    else:
        log.info("task %s handed back; lease %s released", lease.task_id, lease.value)


async def _shielded(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run ``coroutine`` to its end even if the caller is cancelled meanwhile (again)."""
    task = asyncio.ensure_future(coroutine)
    while not task.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)


__all__ = ["hand_back"]
