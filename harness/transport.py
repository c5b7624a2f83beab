"""Publish task runs to the broker, and say honestly whether a publish happened.

On a ``redis://`` broker a run message is one ``LPUSH`` of the envelope kombu would write
(``wire.run_envelope``), sent on the caller's event loop by a client of its own. Other
brokers get a bare Celery client (no worker code is imported), run in a thread. Nothing
is retried either way: a retry after an ambiguous failure could deliver one task twice.
A failure to connect, or the broker refusing the write (``OOM``), proves the message
never left; any later failure leaves its fate unknown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Protocol
from urllib.parse import urlsplit
from uuid import uuid4

from celery import Celery
from redis.asyncio import Redis
from redis.exceptions import RedisError

from wire.celery_config import RUN_TASK, START_PRIORITY, celery_config
from wire.kombu_transport import TRANSPORT_ALIAS
from wire.message_spans import publishing
from wire.messages import RunMessage
from wire.run_envelope import origin, queue_list, run_envelope
from wire.settings import Settings
from wire.tracing_context import active

from .connections import PUBLISHER_POOL_SIZE, caller_pool, client_name
from .redis_errors import Fate, fate
from .revokes import RevokeBatcher

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
    surely did not reach the broker; ``revoke`` is best effort. ``close`` runs in a
    thread; a publisher with connections on the event loop also has ``async aclose()``,
    which the harness awaits first."""

    async def publish(
        self, task_id: str, session_id: str | None = None, queue: str | None = None
    ) -> None:
        """Publish the task's run on ``queue`` (default: the caller's ``AHP_QUEUE``)."""
        ...

    async def revoke(self, task_id: str) -> None: ...

    def close(self) -> None: ...


class TaskPublisher:
    """``through_celery``: publish with ``Celery.send_task`` even on a ``redis://`` broker
    (other brokers always are)."""

    def __init__(self, settings: Settings, *, through_celery: bool = False) -> None:
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
            "client_name": client_name(),
        }
        direct = urlsplit(settings.effective_broker_url).scheme == "redis" and not through_celery
        if direct:
            config["broker_transport"] = TRANSPORT_ALIAS  # one Redis client, not one per revoke
        self._app.conf.update(config)
        self._direct = direct
        self._broker: Redis | None = None  # created on the first publish, on its loop
        self._sender = origin()
        self._reply_to = str(uuid4())
        self._revokes = RevokeBatcher(self._broadcast_revoke)

    def _broadcast_revoke(self, task_ids: Sequence[str]) -> None:
        self._app.control.revoke(list(task_ids))

    def _broker_client(self) -> Redis:
        if self._broker is None:
            # No redis-py retry (as the caller's own pool, see harness.redis_errors): the
            # one attempt's error says whether the message left.
            pool = caller_pool(self._settings.effective_broker_url, PUBLISHER_POOL_SIZE)
            self._broker = Redis(connection_pool=pool)
        return self._broker

    async def _push(
        self, message: RunMessage, queue: str, trace: Mapping[str, str] | None = None
    ) -> None:
        envelope = run_envelope(
            queue,
            message.task_id,
            message.kwargs(),
            START_PRIORITY,
            sender=self._sender,
            reply_to=self._reply_to,
            trace=trace,
        )
        await self._broker_client().lpush(queue_list(queue, START_PRIORITY), envelope)

    def _publish(
        self,
        task_id: str,
        session_id: str | None,
        queue: str,
        trace: Mapping[str, str] | None = None,
    ) -> None:
        message = RunMessage(self._settings.namespace, task_id, session_id)
        self._app.send_task(
            RUN_TASK,
            kwargs=message.kwargs(),
            task_id=task_id,
            queue=queue,
            priority=START_PRIORITY,
            retry=False,
            headers=dict(trace) if trace else None,
        )

    async def publish(
        self, task_id: str, session_id: str | None = None, queue: str | None = None
    ) -> None:
        """Publish the task's run on ``queue`` (default: this caller's ``AHP_QUEUE``).
        While tracing, in a ``publish <queue>`` span whose context the message carries
        (``wire.message_spans``)."""
        queue = queue or self._settings.queue
        if not active():
            await self._send(task_id, session_id, queue)
            return
        with publishing(queue, task_id) as trace:
            await self._send(task_id, session_id, queue, trace)

    async def _send(
        self,
        task_id: str,
        session_id: str | None,
        queue: str,
        trace: Mapping[str, str] | None = None,
    ) -> None:
        if self._direct:
            message = RunMessage(self._settings.namespace, task_id, session_id)
            try:
                await self._push(message, queue, trace)
            except (RedisError, OSError) as error:
                raise PublishError(classify(error), error) from error
            return
        try:
            await asyncio.to_thread(self._publish, task_id, session_id, queue, trace)
        except Exception as error:
            raise PublishError(classify(error), error) from error

    async def revoke(self, task_id: str) -> None:
        """Tell workers to discard the message; the durable cancel flag is authoritative."""
        try:
            await self._revokes.revoke(task_id)
        except Exception:
            log.warning("revoke of %s not broadcast; the durable cancel flag still holds", task_id)

    async def aclose(self) -> None:
        """Close the broker connections of the event loop (before ``close``)."""
        broker, self._broker = self._broker, None
        if broker is not None:
            await broker.aclose()
            await broker.connection_pool.disconnect()

    def close(self) -> None:
        self._revokes.close()
        self._app.close()
