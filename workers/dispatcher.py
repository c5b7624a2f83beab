"""Publishes the runs of parked tasks the moment their tenant has room (docs/tenants.md).

The step that admits a parked task (a settle of one of its tenant's tasks, a start, the
sweeper's pass) makes its publish owed, as a promotion does, and pushes its id onto
``Keys.dispatch_queue``, oldest first. Every worker process pops that list on its loop
and publishes the runs, in that order, each on the queue its task's record names, at
start priority (never ahead of another tenant's start). An id popped by a worker that
dies before publishing is not lost: the task is due in the starting set, and the sweeper
publishes it after the hold-off. A second message of a task is harmless (the claim runs
it once).
"""

from __future__ import annotations

import asyncio
import logging

from redis.asyncio import Redis

from wire.backoff import Outage
from wire.celery_config import START_PRIORITY
from wire.keys import Keys
from wire.records import TaskField
from wire.store_results import reply_text

from .control import raise_if_cancelled
from .republish import Republish

log = logging.getLogger(__name__)

_TAKE_TIMEOUT_SECONDS = 2
_BATCH = 64
"""Most ids taken at once: one pipelined read of their records, one thread hop to
publish them all."""


class ParkedRunDispatcher:
    def __init__(self, redis: Redis, keys: Keys, publish: Republish, default_queue: str) -> None:
        self._redis = redis
        self._keys = keys
        self._publish = publish
        self._default_queue = default_queue

    async def serve(self) -> None:
        """Publish admitted parked tasks until cancelled: every id waiting at once is
        taken and published together (each settle of a busy tenant admits one)."""
        queue = self._keys.dispatch_queue()
        outage = Outage("parked-run dispatcher", logger=log)
        while True:
            raise_if_cancelled()
            try:
                first = await self._redis.blpop([queue], timeout=_TAKE_TIMEOUT_SECONDS)
                if first is None:
                    continue
                more: list[bytes | str] = await self._redis.lpop(queue, _BATCH - 1) or []  # type: ignore[assignment]
                task_ids = [reply_text(first[1]), *(reply_text(item) for item in more)]
                async with self._redis.pipeline(transaction=False) as pipe:
                    for task_id in task_ids:
                        pipe.hmget(self._keys.task(task_id), [TaskField.SESSION, TaskField.QUEUE])
                    records = await pipe.execute()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                await outage.back_off(error)
                continue
            outage.recovered()
            runs = [
                (
                    task_id,
                    reply_text(session),
                    reply_text(queue_name) if queue_name else self._default_queue,
                )
                for task_id, (session, queue_name) in zip(task_ids, records, strict=True)
                if session is not None  # settled and expired meanwhile: nothing to run
            ]
            await asyncio.to_thread(self._publish_all, runs)

    def _publish_all(self, runs: list[tuple[str, str, str]]) -> None:
        """In a thread (Celery's publish blocks), in the order they were admitted."""
        for task_id, session_id, queue in runs:
            try:
                self._publish(task_id, session_id, queue, START_PRIORITY)
            except Exception:
                log.exception("publishing parked task %s failed; the sweeper will", task_id)


__all__ = ["ParkedRunDispatcher"]
