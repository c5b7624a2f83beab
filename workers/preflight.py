"""Checks a worker makes before it serves: the checkpoint Redis has what checkpoints need.

Run in the worker's main process when Celery initialises it (``worker_init``), before the
pool and the consumer start: a worker pointed at a Redis without the Query Engine and
JSON exits non-zero with one message (see ``wire.modules``) instead of reporting ready
and taking tasks it can never settle.
"""

from __future__ import annotations

import logging
import sys
import time
from datetime import timedelta

import redis

from wire.backoff import Retries
from wire.modules import missing_modules_sync, redact_url
from wire.redis_options import pool_options
from wire.settings import Settings

log = logging.getLogger(__name__)

EXIT_UNSUITABLE_REDIS = 78
"""The worker's exit code when Redis lacks the modules (``EX_CONFIG`` of sysexits.h)."""


def _unreachable_retries() -> Retries:
    """Pauses while Redis cannot be reached: 0.5 s doubling to 5 s, as Celery's broker."""
    return Retries(first=timedelta(seconds=0.5), cap=timedelta(seconds=5))


def refuse_without_modules(settings: Settings) -> None:
    """Return once the checkpoint Redis has the Query Engine and JSON; exit the process
    (``SystemExit``, the message on stderr) if it lacks them. While Redis cannot be
    reached this waits, retrying with backoff, like Celery waits for its broker."""
    url = settings.effective_checkpoint_url
    retries = _unreachable_retries()
    warned = False
    while True:
        client = redis.Redis.from_url(
            url, socket_timeout=5, socket_connect_timeout=5, **pool_options()
        )
        try:
            message = missing_modules_sync(client, url)
        except (redis.ConnectionError, redis.TimeoutError) as error:
            if not warned:
                log.warning("cannot reach Redis at %s (%s); retrying", redact_url(url), error)
                warned = True
            time.sleep(retries.next_pause())
            continue
        finally:
            client.close()
        if message is None:
            return
        print(f"ahp worker: {message}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_UNSUITABLE_REDIS)
