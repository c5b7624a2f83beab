"""The messaging spans of run messages, on both sides of the broker.

``publish <queue>`` (PRODUCER) is one run message leaving (a caller's start, resume or
promotion; a worker's republish or promotion); its context is what the message's
``traceparent`` header carries. ``process <queue>`` (CONSUMER) is one delivery of it
in a worker (``workers.spans``). Attributes follow OpenTelemetry's messaging conventions:
``messaging.system`` ``celery``, ``messaging.destination.name`` the queue,
``messaging.operation`` ``publish`` / ``process``, ``messaging.message.id`` the task id
(which is the Celery task id), and ``ahp.task_id``.

Called only while ``wire.tracing_context.active()`` holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.trace import SpanKind

from .tracing_context import carrier, tracer

SYSTEM = "celery"

# The project's own span attributes, set by the caller's and the worker's spans alike.
TASK_ID = "ahp.task_id"
SESSION_ID = "ahp.session_id"
TENANT = "ahp.tenant"
OUTCOME = "ahp.outcome"


def message_attributes(queue: str, task_id: str, operation: str) -> dict[str, str]:
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation": operation,
        "messaging.message.id": task_id,
        TASK_ID: task_id,
    }


@contextmanager
def publishing(queue: str, task_id: str) -> Iterator[dict[str, str]]:
    """The ``publish <queue>`` span, current inside; yields the headers (``traceparent``,
    ``tracestate``) the message carries."""
    with tracer().start_as_current_span(
        f"publish {queue}",
        kind=SpanKind.PRODUCER,
        attributes=message_attributes(queue, task_id, "publish"),
    ):
        yield carrier()


__all__ = ["SYSTEM", "message_attributes", "publishing"]
