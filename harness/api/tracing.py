"""The HTTP API's traces: a server span per request, continuing the caller's trace.

FastAPI's maintained instrumentation (``opentelemetry-instrumentation-fastapi``, in the
``otel`` extra) makes one SERVER span per request (``http.request.method``,
``http.route``, ``http.response.status_code``...), continuing the W3C ``traceparent`` the
request carries; the harness calls a handler makes (a task's start and its run message,
a response that resumes a task) are its children, down to the worker's run. The
per-message ``http send`` / ``http receive`` spans are left out (an event stream would
make one per event), and so are the probes and ``/metrics``.

``ahp-celery api`` sets the SDK up from ``OTEL_*`` when ``AHP_TRACING`` asks for it
(``wire.tracing_setup``); an app embedded in your program is instrumented when your
program installed a tracer provider before building it. Without one, nothing is added.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI

from wire.settings import Settings
from wire.tracing_context import active
from wire.tracing_setup import configure_tracing

log = logging.getLogger(__name__)

UNTRACED_URLS = "/healthz,/readyz,/metrics"
"""Requests that make no span (``excluded_urls`` of the instrumentation)."""


def trace_requests(app: FastAPI, *, own_process: bool) -> bool:
    """Instrument ``app`` when this process traces; ``own_process``: the app is the
    process's (built from the environment), which may set the SDK up first. Whether
    requests are traced."""
    if own_process:
        configure_tracing(Settings(), "ahp-api")
    if not active():
        return False
    try:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    except ImportError as error:
        log.warning(
            "tracing is on but opentelemetry-instrumentation-fastapi is not installed "
            "(the otel extra): requests are not traced: %s",
            error,
        )
        return False
    FastAPIInstrumentor.instrument_app(
        app, excluded_urls=UNTRACED_URLS, exclude_spans=["receive", "send"]
    )
    return True


__all__ = ["UNTRACED_URLS", "trace_requests"]
