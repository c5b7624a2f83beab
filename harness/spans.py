"""The caller's spans of a task: its start, its run messages, and the outcome it observed.

Made with the tracer provider the program installed (``wire.tracing_context``); the
harness never installs one. Every function here is called only while
:func:`wire.tracing_context.active` holds: with no provider the harness builds nothing.

- ``ahp.start_task`` (INTERNAL): one ``start_task`` of a session handle, with
  ``ahp.session_id`` and ``ahp.task_id``. Its context is the task's trace context: kept in
  the task record (``TaskField.TRACE``) before the run message leaves, so every later
  message of the task, from any process, continues this trace.
- ``publish <queue>`` (PRODUCER, ``messaging.*``): one run message, whose headers carry its
  context (``traceparent`` / ``tracestate``); made by ``harness.transport``.
- ``ahp.resume`` / ``ahp.promote`` (INTERNAL): a response that made a paused task due, or
  a cancellation that started the task queued behind it, in that task's own trace,
  linked to the span that caused it (an HTTP request of another trace, say); its
  ``publish`` is the message.
- ``ahp.task_outcome`` (INTERNAL): the handle observed the task's outcome, from the start to
  that moment, with ``ahp.outcome``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind

from wire.message_spans import OUTCOME, SESSION_ID, TASK_ID
from wire.store import RecordStore
from wire.tracing_context import carrier, record_value, stored_context, tracer

from .transport import Publisher

log = logging.getLogger(__name__)


@contextmanager
def starting(session_id: str) -> Iterator[Span]:
    """The ``ahp.start_task`` span, current inside."""
    with tracer().start_as_current_span(
        "ahp.start_task", kind=SpanKind.INTERNAL, attributes={SESSION_ID: session_id}
    ) as span:
        yield span


def started(span: Span, task_id: str) -> None:
    span.set_attribute(TASK_ID, task_id)


async def keep_trace(store: RecordStore, task_id: str) -> Context:
    """Keep the current span's context in the just-started task's record; the context.
    A failed write is logged, never raised: its later messages then start new traces."""
    current = otel_context.get_current()
    headers = carrier(current)
    if headers:
        try:
            await store.record_trace(task_id, record_value(headers))
        except Exception as error:
            log.warning("task %s: its trace context was not kept: %s", task_id, error)
    return current


@contextmanager
def in_task_trace(trace_field: str | None, name: str, task_id: str) -> Iterator[None]:
    """A span ``name`` in the task's trace (``trace_field``: the record's ``trace``),
    linked to the current span, current inside; without a stored trace, a new one."""
    parent = stored_context(trace_field) or Context()
    here = trace.get_current_span().get_span_context()
    links = [Link(here)] if here.is_valid else []
    with tracer().start_as_current_span(
        name, context=parent, kind=SpanKind.INTERNAL, links=links, attributes={TASK_ID: task_id}
    ):
        yield


async def publish_in_task_trace(
    store: RecordStore, publisher: Publisher, task_id: str, session_id: str, name: str
) -> None:
    """Publish a later run message of the task (its resume, its promotion) in a span
    ``name`` of the task's own trace (the record's ``trace``), on the queue it runs on."""
    queue, trace_field = await store.task_route(task_id)
    with in_task_trace(trace_field, name, task_id):
        await publisher.publish(task_id, session_id, queue)


def outcome_observed(parent: Context, task_id: str, outcome: str, since_ns: int) -> None:
    """The ``ahp.task_outcome`` span: from ``since_ns`` (the start) to now."""
    span = tracer().start_span(
        "ahp.task_outcome",
        context=parent,
        kind=SpanKind.INTERNAL,
        start_time=since_ns,
        attributes={TASK_ID: task_id, OUTCOME: outcome},
    )
    span.end(time.time_ns())


__all__ = [
    "in_task_trace",
    "keep_trace",
    "outcome_observed",
    "publish_in_task_trace",
    "started",
    "starting",
]
