"""A turn that Redis failed mid-way: wait for Redis, then run the turn again.

A turn whose error says Redis could not be reached (a restart, a reset connection) is run
again by the same delivery from the session's last checkpoint, as a resumed run on another
worker would, once Redis answers and while the lease may still be the run's: at most
:data:`TURN_RESUMES` times, with a recoverable warning each time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agent_harness_protocol import TaskId, Warning, WarningKind

from wire.backoff import CONNECTION_ERRORS, Outage, connection_lost
from wire.event_codec import SEMANTIC, event_to_entry
from wire.settings import Settings
from wire.store import RecordStore

from .event_sink import EventSink
from .lease import SessionLease
from .live_run import LiveRun

log = logging.getLogger(__name__)

TURN_RESUMES = 3
"""How many times one delivery runs its turn again after Redis was lost mid-turn; a
Redis that keeps failing the turn after that ends it ``Failed``, with the error."""


def interrupted_by_redis(execution: asyncio.Task[Any]) -> bool:
    """Whether the turn ended with an error saying Redis could not be reached, itself or
    as the cause of another (redisvl raises ``RedisSearchError`` from the connection
    error of a checkpoint search)."""
    if not execution.done() or execution.cancelled():
        return False
    return connection_lost(execution.exception())


async def cancel_known(store: RecordStore, live: LiveRun) -> bool:
    """Whether cancellation was requested, as far as can be known now (the durable
    flag is read when Redis answers)."""
    if live.cancel_requested.is_set():
        return True
    try:
        return await store.cancel_recorded(live.task_id)
    except CONNECTION_ERRORS:
        return False


async def resume_after_redis(
    settings: Settings,
    store: RecordStore,
    live: LiveRun,
    lease: SessionLease,
    sink: EventSink,
    execution: asyncio.Task[Any],
) -> bool:
    """The turn failed because Redis could not be reached: wait for Redis while the lease
    may still be ours, then say so in a recoverable warning. Whether the turn may run
    again from the session's last checkpoint."""
    error = execution.exception()
    outage = Outage(
        f"task {live.task_id}: Redis lost mid-turn", window=settings.lease_ttl, logger=log
    )
    while True:
        if lease.lost.is_set() or live.cancel_requested.is_set():
            return False
        try:
            await store.redis.ping()
            break
        except CONNECTION_ERRORS as ping_error:
            if outage.exhausted():
                return False
            await outage.back_off(ping_error)
    if lease.lost.is_set() or await cancel_known(store, live):
        return False
    tag, payload = event_to_entry(
        Warning(
            TaskId(live.task_id),
            WarningKind.RECOVERABLE,
            f"the turn lost its Redis connection ({type(error).__name__}: {error}); "
            "resuming from the session's last checkpoint; output streamed before is "
            "superseded and usage is unknown",
        )
    )
    sink.emit(SEMANTIC, tag, payload)
    return True


__all__ = ["TURN_RESUMES", "cancel_known", "interrupted_by_redis", "resume_after_redis"]
