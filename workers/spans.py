"""A worker's spans of one delivery: its processing, claim, graph turn, pause and settle.

(LangSmith's run tree is ``workers.tracing``; this module is OpenTelemetry's.) Every
function here is called only while ``wire.tracing_context.active()`` holds, so a worker
without a tracer provider builds no span and no attribute.

- ``process <queue>`` (CONSUMER, ``messaging.*``, ``ahp.task_id``, ``ahp.session_id``,
  ``ahp.tenant``, ``ahp.outcome``): one delivery, from its admission to its summary. Its
  parent is the message's ``traceparent`` header; without a valid one, the trace context
  the task record keeps (``TaskField.TRACE``); without either, a new trace. Malformed
  headers are ignored, never fatal.
- ``ahp.claim`` (INTERNAL, ``ahp.claim.result``): the claim script's step.
- ``ahp.turn`` (INTERNAL): the LangGraph run of the turn; each graph step (a node's update)
  is a ``langgraph.step`` event with ``langgraph.node``. The model and tool calls inside
  are spans of their own (``workers.call_spans``).
- ``ahp.awaiting_response``: an event on the delivery's span when the task paused for the
  caller (``ahp.interaction_ids``); the resume's delivery is a new ``process`` span in
  the same trace.
- ``ahp.settle`` (INTERNAL, ``ahp.outcome``): the fenced step that settles the task.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from wire.message_spans import OUTCOME, SESSION_ID, TASK_ID, TENANT, message_attributes
from wire.records import TaskField
from wire.tracing_context import TRACE_HEADERS, context_from, stored_context, tracer

from .claimer import ClaimedRun


def message_headers(request: Any) -> dict[str, object]:
    """The trace headers of a Celery task request (absent ones left out)."""
    headers: dict[str, object] = {}
    for name in TRACE_HEADERS:
        value = getattr(request, name, None)
        if value is not None:
            headers[name] = value
    return headers


class DeliverySpan:
    """The ``process <queue>`` span of one delivery, begun after its claim (whose record
    may name the trace) with the time the delivery began."""

    def __init__(self, task_id: str, queue: str | None, headers: Mapping[str, object]) -> None:
        self._task_id = task_id
        self._queue = queue or ""
        self._headers = headers
        self._began = time.time_ns()
        self.span: Span | None = None

    def claimed(self, claimed: ClaimedRun | None, claim_began: int) -> None:
        """Begin the span (and record the claim's) once the claim returned."""
        record: Mapping[str, str] = claimed.claim.task if claimed is not None else {}
        parent = context_from(self._headers) or stored_context(record.get(TaskField.TRACE))
        attributes: dict[str, str] = message_attributes(self._queue, self._task_id, "process")
        if claimed is not None:
            attributes[SESSION_ID] = claimed.lease.session_id
            tenant = record.get(TaskField.TENANT)
            if tenant:
                attributes[TENANT] = tenant
        self.span = tracer().start_span(
            f"process {self._queue}".rstrip(),
            context=parent or Context(),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            start_time=self._began,
        )
        claim = tracer().start_span(
            "ahp.claim",
            context=trace.set_span_in_context(self.span),
            attributes={
                TASK_ID: self._task_id,
                "ahp.claim.result": "claimed" if claimed is not None else "not_run",
            },
            start_time=claim_began,
        )
        claim.end()

    def context(self) -> Context | None:
        return None if self.span is None else trace.set_span_in_context(self.span)

    def end(self, outcome: str | None, error: BaseException | None = None) -> None:
        span = self.span
        if span is None:
            return
        if outcome is not None:
            span.set_attribute(OUTCOME, outcome)
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end()


@contextmanager
def turn(task_id: str) -> Iterator[Span]:
    """The ``ahp.turn`` span, current inside (the model and tool calls are its children)."""
    with tracer().start_as_current_span(
        "ahp.turn", kind=SpanKind.INTERNAL, attributes={TASK_ID: task_id}
    ) as span:
        yield span


def steps(span: Span, payload: object) -> None:
    """A ``langgraph.step`` event per node of an ``updates`` stream item."""
    if not isinstance(payload, dict):
        return
    for node in payload:
        span.add_event("langgraph.step", {"langgraph.node": str(node)})


def paused(interaction_ids: Sequence[str]) -> None:
    """The ``ahp.awaiting_response`` event on the delivery's span (the current one)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event("ahp.awaiting_response", {"ahp.interaction_ids": list(interaction_ids)})


@contextmanager
def settling(task_id: str, outcome: str) -> Iterator[None]:
    with tracer().start_as_current_span(
        "ahp.settle", kind=SpanKind.INTERNAL, attributes={TASK_ID: task_id, OUTCOME: outcome}
    ):
        yield


__all__ = ["DeliverySpan", "message_headers", "paused", "settling", "steps", "turn"]
