"""The W3C trace context a task carries: in its run messages' headers and its record.

OpenTelemetry's API only, never its SDK: a process traces when its application (or
``wire.tracing_setup``) installed a tracer provider, and :func:`active` says so. While it
does not, nothing here is called on a hot path: callers check :func:`active` first and
build no attribute, span or carrier.

A task's trace context travels as W3C ``traceparent`` / ``tracestate``:

- in the headers of every run message of the task (beside Celery's own), which the
  worker's run continues: the caller's start, a resume after an approval, a promotion, a
  worker's republish after a lost worker or a hand-back;
- in the task record (``TaskField.TRACE``, JSON ``{"traceparent": ..., "tracestate":
  ...}``), written right after the start, so every later message of the task (published
  by any process, long after the start) continues the start's trace.

Anything read back is untrusted: :func:`context_from` and :func:`stored_context` return
``None`` for a missing, malformed or oversized value, and never raise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
TRACE_HEADERS = (TRACEPARENT, TRACESTATE)
"""The run message headers (and record keys) of a task's trace context."""

INSTRUMENTATION = "agent_harness_protocol_celery"
"""The instrumentation scope of every span this project makes."""

_MAX_TRACEPARENT = 128
_MAX_TRACESTATE = 512  # W3C: at most 32 members; 512 characters is the recommended bound
_W3C = TraceContextTextMapPropagator()
_tracer: tuple[object, Tracer] | None = None


def active() -> bool:
    """Whether this process traces: an SDK (or another real) tracer provider is installed.

    With OpenTelemetry's default proxy provider (nothing configured) it is ``False``, and
    the callers build no span."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, ProxyTracerProvider | NoOpTracerProvider)


def tracer() -> Tracer:
    """The project's tracer from the provider installed now (cached per provider: a test
    that installs another provider gets spans of its own)."""
    global _tracer
    provider = trace.get_tracer_provider()
    cached = _tracer
    if cached is None or cached[0] is not provider:
        cached = (provider, provider.get_tracer(INSTRUMENTATION))
        _tracer = cached
    return cached[1]


def carrier(context: Context | None = None) -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) of ``context``'s span (default: the current
    one); empty when it has no valid span."""
    headers: dict[str, str] = {}
    _W3C.inject(headers, context=context)
    return {name: headers[name] for name in TRACE_HEADERS if name in headers}


def context_from(headers: Mapping[str, object] | None) -> Context | None:
    """The remote span context of ``headers`` (message headers, a record's carrier), or
    ``None``: absent, malformed, oversized or invalid. Never raises."""
    if not headers:
        return None
    try:
        parent = headers.get(TRACEPARENT)
        if not isinstance(parent, str) or len(parent) > _MAX_TRACEPARENT:
            return None
        clean = {TRACEPARENT: parent}
        state = headers.get(TRACESTATE)
        if isinstance(state, str) and len(state) <= _MAX_TRACESTATE:
            clean[TRACESTATE] = state
        context = _W3C.extract(clean)
    except Exception:
        return None
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def record_value(headers: Mapping[str, str]) -> str:
    """The task record's ``trace`` field for a carrier (JSON)."""
    return json.dumps({name: headers[name] for name in TRACE_HEADERS if name in headers})


def stored_context(value: str | bytes | None) -> Context | None:
    """The context a task record's ``trace`` field holds, or ``None`` (absent, not JSON,
    not a valid carrier). Never raises."""
    if not value or len(value) > 2 * (_MAX_TRACEPARENT + _MAX_TRACESTATE):
        return None
    try:
        document = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    return context_from(document) if isinstance(document, dict) else None


__all__ = [
    "INSTRUMENTATION",
    "TRACEPARENT",
    "TRACESTATE",
    "TRACE_HEADERS",
    "active",
    "carrier",
    "context_from",
    "record_value",
    "stored_context",
    "tracer",
]
