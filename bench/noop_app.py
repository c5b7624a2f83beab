"""A bench-only Celery app with one no-op task: the raw Celery round-trip baseline.

It uses the project's own Celery configuration (``wire.celery_config``: JSON, late
acknowledgement, prefetch 1, task events on, no result backend), so the difference to
the AHP harness is the harness's own work, not a different Celery setup. Completion is
observed through a Redis list: the task pushes its token onto the reply key the caller
is blocked on (BLPOP).

Configured from the environment so that ``celery -A bench.noop_app worker`` works:
``BENCH_NOOP_REDIS_URL`` and ``BENCH_NOOP_QUEUE``.
"""

from __future__ import annotations

import os
from typing import Any

import redis
from celery import Celery

from wire.celery_config import celery_config
from wire.settings import Settings

NOOP_TASK = "bench.noop"
REPLY_TTL_SECONDS = 120


def noop_settings(redis_url: str, queue: str) -> Settings:
    return Settings(redis_url=redis_url, queue=queue, namespace="bench-noop")


def create_app(redis_url: str, queue: str) -> Celery:
    app = Celery("bench_noop", set_as_current=False)
    app.conf.update(celery_config(noop_settings(redis_url, queue)))
    app.conf.task_routes = {NOOP_TASK: {"queue": queue}}
    client: dict[str, redis.Redis] = {}

    def _redis() -> redis.Redis:
        # Created lazily, so every prefork child opens its own connection after the fork.
        pid = os.getpid()
        key = str(pid)
        if key not in client:
            client.clear()
            client[key] = redis.Redis.from_url(redis_url)
        return client[key]

    @app.task(name=NOOP_TASK, acks_late=True)  # type: ignore[untyped-decorator]
    def noop(reply_key: str, token: str) -> None:
        pipe = _redis().pipeline(transaction=False)
        pipe.rpush(reply_key, token)
        pipe.expire(reply_key, REPLY_TTL_SECONDS)
        pipe.execute()

    app.noop = noop
    return app


def _from_env() -> Any:
    url = os.environ.get("BENCH_NOOP_REDIS_URL")
    queue = os.environ.get("BENCH_NOOP_QUEUE")
    if not url or not queue:
        return None
    return create_app(url, queue)


# ``celery -A bench.noop_app worker`` finds this; importing the module for its
# ``create_app`` (as the caller does) leaves it None when the variables are unset.
app = _from_env()
