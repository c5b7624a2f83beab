"""Publish task runs to the broker, and say honestly whether a publish happened.

The producer is a bare Celery client (no worker code is imported). Celery's publish
retry is off: a retry after an ambiguous failure could deliver one task twice. A
failure to connect, or the broker refusing the write (``OOM``), proves the message never
left; any later failure leaves its fate unknown.
"""

from __future__ import annotations

import asyncio
import logging
from enum import StrEnum
from typing import Protocol
from urllib.parse import urlsplit

from celery import Celery

from wire.celery_config import RUN_TASK, START_PRIORITY, celery_config
from wire.kombu_transport import TRANSPORT_ALIAS
from wire.messages import RunMessage
from wire.settings import Settings

from .redis_errors import Fate, fate

log = logging.getLogger(__name__)


class PublishFate(StrEnum):
    PUBLISHED = "published"
    NOT_DELIVERED = "not_delivered"
    UNKNOWN = "unknown"


class PublishError(Exception):
    def __init__(self, fate: PublishFate, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.fate = fate
        self.error = error


def classify(error: BaseException) -> PublishFate:
    """Whether a publish error proves the message never reached the broker: the
    connection could not be made, or the broker refused the write (``OOM`` at
    ``maxmemory``, a read-only replica); see :mod:`harness.redis_errors`."""
    if fate(error) is Fate.REFUSED:
        return PublishFate.NOT_DELIVERED
    return PublishFate.UNKNOWN


class Publisher(Protocol):
    """Where a harness publishes run messages; :class:`TaskPublisher` is the real one.

    ``publish`` raises :class:`PublishError` whose ``fate`` says whether the message
    surely did not reach the broker; ``revoke`` is best effort."""

    async def publish(self, task_id: str, session_id: str | None = None) -> None: ...

    async def revoke(self, task_id: str) -> None: ...

    def close(self) -> None: ...


class TaskPublisher:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._app = Celery("ahp_harness", set_as_current=False)
        config = celery_config(settings)
        # Connecting is retried briefly (nothing has been sent yet, so this cannot
        # duplicate a message); a broker that stays down fails the start in about 0.5 s
        # instead of kombu's default of several seconds.
        config["broker_transport_options"] = {
            **config["broker_transport_options"],
            "max_retries": 2,
            "interval_start": 0.1,
            "interval_step": 0.2,
            "interval_max": 0.5,
        }
        if urlsplit(settings.effective_broker_url).scheme == "redis":
            config["broker_transport"] = TRANSPORT_ALIAS  # one Redis client, not one per publish
        self._app.conf.update(config)

    def _publish(self, task_id: str, session_id: str | None) -> None:
        message = RunMessage(self._settings.namespace, task_id, session_id)
        self._app.send_task(
            RUN_TASK,
            kwargs=message.kwargs(),
            task_id=task_id,
            queue=self._settings.queue,
            priority=START_PRIORITY,
            retry=False,
        )

    async def publish(self, task_id: str, session_id: str | None = None) -> None:
        try:
            await asyncio.to_thread(self._publish, task_id, session_id)
        except Exception as error:
            raise PublishError(classify(error), error) from error

    async def revoke(self, task_id: str) -> None:
        """Tell workers to discard the message; the durable cancel flag is authoritative."""
        try:
            await asyncio.to_thread(self._app.control.revoke, task_id)
        except Exception:
            log.warning("revoke of %s not broadcast; the durable cancel flag still holds", task_id)

    def close(self) -> None:
        self._app.close()
