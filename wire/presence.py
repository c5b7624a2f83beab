"""What the pool can carry, per queue and per worker process: the autoscaling signal.

Every worker process reports itself every :data:`REPORT_INTERVAL` (``workers.presence``):
the queues it consumes, its run slots and its runs in flight, in a key that lapses after
:data:`PRESENCE_TTL` (a killed process drops out on its own). :func:`queue_gauges` adds
what the broker holds: the run messages waiting on each queue, and how long the oldest
of them has waited. The API renders both for Prometheus (``GET /metrics``), where an
autoscaler (KEDA's Prometheus scaler, or an operator running ``docker compose up
--scale``) reads them; see docs/scaling.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from pydantic import BaseModel, ConfigDict
from redis.asyncio import Redis

from .keys import Keys
from .store_results import reply_text

REPORT_INTERVAL = timedelta(seconds=5)
"""How often a worker process reports itself."""
PRESENCE_TTL = 3 * REPORT_INTERVAL
"""How long a report stands: a process not heard from for three intervals is gone."""


class WorkerPresence(BaseModel):
    """One worker process, as it last reported itself (``Keys.worker_presence``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    """``<node name>/<pid>``."""
    queues: tuple[str, ...]
    """The broker queues it consumes."""
    slots: int
    """Runs it carries at once (the threads pool's concurrency; 1 per prefork child)."""
    in_flight: int
    """Runs it carries now."""
    seen_ms: int
    """When it reported this (ms since the epoch)."""

    @property
    def free(self) -> int:
        return max(self.slots - self.in_flight, 0)


@dataclass(frozen=True, slots=True)
class QueueGauge:
    """One queue's figures: what waits on it and what the pool can take from it."""

    queue: str
    waiting: int | None
    """Run messages waiting at the broker (``None``: the broker is not this Redis)."""
    oldest_wait: timedelta | None
    """How long the oldest waiting start has waited (``None``: none waits, or unknown)."""
    in_flight: int
    """Runs carried by the live workers that consume this queue."""
    free_slots: int
    """Run slots free on those workers (a worker of several queues counts for each)."""
    workers: int
    """Live worker processes consuming it."""


async def live_workers(redis: Redis, keys: Keys, now_ms: int) -> list[WorkerPresence]:
    """The worker processes heard from within :data:`PRESENCE_TTL`, by name; members of
    processes that stopped reporting are dropped from ``Keys.workers``."""
    horizon = now_ms - int(PRESENCE_TTL.total_seconds() * 1000)
    pipe = redis.pipeline(transaction=False)
    pipe.zremrangebyscore(keys.workers(), "-inf", f"({horizon}")
    pipe.zrange(keys.workers(), 0, -1)
    _, names = await pipe.execute()
    if not names:
        return []
    raws = await redis.mget([keys.worker_presence(reply_text(name)) for name in names])
    found = [WorkerPresence.model_validate_json(raw) for raw in raws if raw is not None]
    return sorted(found, key=lambda presence: presence.name)


async def queue_gauges(
    redis: Redis,
    keys: Keys,
    queues: Iterable[str],
    workers: Sequence[WorkerPresence],
    now_ms: int,
    *,
    broker_is_redis: bool,
) -> list[QueueGauge]:
    """The figures of ``queues`` (and of every queue a live worker consumes), by name."""
    names = sorted({*queues, *(queue for worker in workers for queue in worker.queues)})
    waiting: dict[str, int | None] = dict.fromkeys(names)
    oldest: dict[str, timedelta | None] = dict.fromkeys(names)
    if broker_is_redis and names:
        pipe = redis.pipeline(transaction=False)
        for name in names:
            for key in Keys.broker_queue_lists(name):
                pipe.llen(key)
                pipe.lindex(key, -1)  # kombu pushes on the left and pops on the right
        replies = await pipe.execute()
        per_queue = 2 * len(Keys.broker_queue_lists(""))
        for index, name in enumerate(names):
            mine = replies[index * per_queue : (index + 1) * per_queue]
            waiting[name] = sum(int(n) for n in mine[0::2])
            oldest[name] = await _oldest_wait(redis, keys, mine[1::2], now_ms)
    gauges = []
    for name in names:
        serving = [worker for worker in workers if name in worker.queues]
        gauges.append(
            QueueGauge(
                queue=name,
                waiting=waiting[name],
                oldest_wait=oldest[name],
                in_flight=sum(worker.in_flight for worker in serving),
                free_slots=sum(worker.free for worker in serving),
                workers=len(serving),
            )
        )
    return gauges


async def _oldest_wait(
    redis: Redis, keys: Keys, tails: Sequence[object], now_ms: int
) -> timedelta | None:
    """The longest wait among the messages at the lists' tails: a start waits since its
    task was started (its score in ``Keys.starting``); a republished run, whose task is
    no longer starting, is not timed."""
    task_ids = [task_id for tail in tails if (task_id := _task_id(tail)) is not None]
    if not task_ids:
        return None
    pipe = redis.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.zscore(keys.starting(), task_id)
    started = [float(score) for score in await pipe.execute() if score is not None]
    if not started:
        return None
    return timedelta(milliseconds=max(now_ms - min(started), 0))


def _task_id(message: object) -> str | None:
    """The task id of a kombu message (``headers.id``, Celery protocol 2)."""
    if not isinstance(message, str | bytes):
        return None
    try:
        headers = json.loads(message).get("headers", {})
    except (ValueError, AttributeError):
        return None  # not a kombu message: the worker's intake drops it
    task_id = headers.get("id") if isinstance(headers, dict) else None
    return task_id if isinstance(task_id, str) else None


__all__ = [
    "PRESENCE_TTL",
    "REPORT_INTERVAL",
    "QueueGauge",
    "WorkerPresence",
    "live_workers",
    "queue_gauges",
]
