"""The broker transport of a worker on a ``redis://`` broker: kombu's Redis transport,
kept up by what would end the worker.

An item on the queue list that is not even a kombu message (not JSON, no
``properties``...) made kombu's Redis transport raise before Celery saw anything, and the
worker exited. :class:`GuardedRedisTransport` (the worker's transport for ``redis://``
brokers) drops such items, logs them and counts them in the connection's
:class:`~workers.intake.MessageIntake`, and drops an acknowledgement whose connection a
Redis restart closed (kombu raised ``AttributeError`` there, which also ended the
worker). Messages that are well-formed envelopes are checked one layer up, by
``workers.intake``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from queue import Empty
from typing import Any
from uuid import uuid4

from kombu import transport as kombu_transports
from kombu.transport import redis as kombu_redis
from kombu.transport.virtual import Message as VirtualMessage

from wire.kombu_transport import ReusingRedisChannel

from .intake import MessageIntake, kind_of

log = logging.getLogger(__name__)


class _NotAMessageError(ValueError):
    """An item on a queue list that is not a kombu message envelope."""


def _envelope_problem(payload: object) -> str | None:
    if not isinstance(payload, dict):
        return f"the item is {kind_of(payload)}, expected a message object"
    properties = payload.get("properties")
    if not isinstance(properties, dict):
        return f"its properties are {kind_of(properties)}, expected an object"
    if not isinstance(properties.get("delivery_tag"), str):
        return f"its delivery tag is {kind_of(properties.get('delivery_tag'))}"
    delivery = properties.get("delivery_info")
    if not isinstance(delivery, dict):
        return f"its delivery info is {kind_of(delivery)}, expected an object"
    for name in ("exchange", "routing_key"):
        if not isinstance(delivery.get(name), str):
            return f"its delivery info's {name} is {kind_of(delivery.get(name))}"
    if not isinstance(payload.get("body"), str | None):
        return f"its body is {kind_of(payload.get('body'))}, expected a string"
    if not isinstance(payload.get("headers"), dict | None):
        return f"its headers are {kind_of(payload.get('headers'))}, expected an object"
    return None


class _GuardedMessage(VirtualMessage):
    def __init__(self, payload: Any, channel: Any = None, **kwargs: Any) -> None:
        problem = _envelope_problem(payload)
        if problem is not None:
            raise _NotAMessageError(problem)
        super().__init__(payload, channel=channel, **kwargs)  # type: ignore[no-untyped-call]


def _connection_gone(channel: Any) -> bool:
    connection = getattr(channel, "connection", None)
    return connection is None or getattr(connection, "client", None) is None


class _GuardedQoS(kombu_redis.QoS):
    """Acknowledgements on a channel whose connection is gone (Redis restarted and the
    consumer reconnected while the task ran) are dropped instead of ending the worker
    with kombu's ``AttributeError``: the message stays in kombu's unacknowledged set and
    comes back after the visibility timeout, and the claim drops it (its task is settled:
    a terminal claim result)."""

    def ack(self, delivery_tag: Any) -> None:
        try:
            super().ack(delivery_tag)  # type: ignore[no-untyped-call]
        except AttributeError:
            if not _connection_gone(self.channel):
                raise
            log.warning("acknowledgement of %s dropped: its connection is gone", delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            super().reject(delivery_tag, requeue=requeue)  # type: ignore[no-untyped-call]
        except AttributeError:
            if not _connection_gone(self.channel):
                raise
            log.warning("rejection of %s dropped: its connection is gone", delivery_tag)

    def restore_unacked(self, client: Any = None) -> Any:
        """Closing a channel whose connection is already gone (the consumer reconnecting
        after Redis went away, while runs of this process are still in progress, as a
        threads-pool worker's are) cannot put its unacknowledged messages back: kombu
        would end the worker with an ``AttributeError``. They stay in the unacknowledged
        set: a run still in progress acknowledges nothing on the new connection, its
        message comes back after the visibility timeout and the claim drops it, and a run
        that was lost meanwhile is resumed by the sweepers."""
        try:
            return super().restore_unacked(client)  # type: ignore[no-untyped-call]
        except AttributeError:
            if not _connection_gone(self.channel):
                raise
            log.warning("unacknowledged messages left for later: the connection is gone")
            return None


class _GuardedChannel(ReusingRedisChannel):
    Message = _GuardedMessage
    QoS = _GuardedQoS

    def _brpop_read(self, **options: Any) -> Any:
        """An item the transport cannot turn into a message is dropped (``BRPOP`` has
        already removed it from the list, and nothing has recorded it as unacknowledged
        yet), logged and counted; the consumer carries on."""
        transport = self.connection
        try:
            return super()._brpop_read(**options)  # type: ignore[no-untyped-call]
        except (Empty, *transport.connection_errors, *transport.channel_errors):
            raise
        except Exception as error:
            intake: MessageIntake | None = getattr(transport, "intake", None)
            problem = str(error) if isinstance(error, _NotAMessageError) else None
            problem = problem or f"{type(error).__name__} while reading it"
            log.warning("dropped an item of the broker queue that is not a message: %s", problem)
            if intake is not None:
                intake.count(None, problem)
            return True


TRANSPORT_ALIAS = "redis-guarded"
"""The kombu transport name of :class:`GuardedRedisTransport` (``broker_transport``).

A name, not the class: a worker reports its connection (``inspect stats``, which Flower
asks every worker for) as JSON, and a class there made the reply unencodable, so the
worker answered nothing. Celery logs the broker as ``redis-guarded://host``."""

INTAKE_OPTION = "ahp_intake"
"""The broker transport option naming the :class:`MessageIntake` a connection reports
to (a key of the process's registry, see :func:`guarded_transport_options`)."""

_intakes: dict[str, MessageIntake] = {}
_intakes_lock = threading.Lock()


class GuardedRedisTransport(kombu_redis.Transport):
    """kombu's Redis transport, dropping queue items that are not messages.

    The intake that counts them is named by the connection's ``ahp_intake`` transport
    option (see :func:`guarded_transport_options`); without it they are only logged."""

    Channel = _GuardedChannel

    @property
    def intake(self) -> MessageIntake | None:
        options = getattr(self.client, "transport_options", None) or {}
        key = options.get(INTAKE_OPTION)
        return _intakes.get(key) if isinstance(key, str) else None


kombu_transports.TRANSPORT_ALIASES[TRANSPORT_ALIAS] = (
    f"{GuardedRedisTransport.__module__}:{GuardedRedisTransport.__qualname__}"
)


def guarded_transport_options(intake: MessageIntake) -> dict[str, str]:
    """Register ``intake`` in this process; the transport option that names it. A
    connection with ``transport=TRANSPORT_ALIAS`` and these options reports to it."""
    key = uuid4().hex
    with _intakes_lock:
        _intakes[key] = intake
    return {INTAKE_OPTION: key}


__all__: Sequence[str] = [
    "INTAKE_OPTION",
    "TRANSPORT_ALIAS",
    "GuardedRedisTransport",
    "guarded_transport_options",
]
