"""Publishes the runs of parked tasks the moment their tenant has room (docs/tenants.md).

The step that admits a parked task (a settle of one of its tenant's tasks, a start, the
sweeper's pass) makes its publish owed, as a promotion does, and pushes its id onto
``Keys.dispatch_queue``. Every worker process pops that list on its loop and publishes
the run on the queue the task's record names. An id popped by a worker that dies before
publishing is not lost: the task is due in the starting set, and the sweeper publishes
it after the hold-off. A second message of a task is harmless (the claim runs it once).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from wire.backoff import Outage
from wire.keys import Keys
from wire.records import TaskField

from .control import raise_if_cancelled

log = logging.getLogger(__name__)

_TAKE_TIMEOUT_SECONDS = 2

Publish = Callable[[str, str], Awaitable[None]]
"""Publishes a task's run on its queue: ``publish(task_id, session_id)``."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class ParkedRunDispatcher:
    def __init__(self, redis: Redis, keys: Keys, publish: Publish) -> None:
        self._redis = redis
        self._keys = keys
        self._publish = publish

    async def serve(self) -> None:
        """Publish admitted parked tasks until cancelled."""
        queue = self._keys.dispatch_queue()
        outage = Outage("parked-run dispatcher", logger=log)
        while True:
            raise_if_cancelled()
            try:
                item = await self._redis.blpop([queue], timeout=_TAKE_TIMEOUT_SECONDS)
                if item is None:
                    continue
                task_id = _text(item[1])
                session = await self._redis.hget(self._keys.task(task_id), TaskField.SESSION)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                await outage.back_off(error)
                continue
            outage.recovered()
            if session is None:
                continue  # settled and expired meanwhile: nothing to run
            try:
                await self._publish(task_id, _text(session))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("publishing parked task %s failed; the sweeper will", task_id)


__all__ = ["ParkedRunDispatcher", "Publish"]
