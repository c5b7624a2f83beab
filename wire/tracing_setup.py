"""Set up OpenTelemetry's SDK in a process of the deployment, from the standard ``OTEL_*``.

Only the deployment's own processes call :func:`configure_tracing`: a worker process
(``workers.runtime``), the HTTP API (``harness.api.tracing``) and ``ahp-celery run``. A
``CeleryHarness`` in your program never does: it traces with whatever tracer provider the
program installed, and with none it builds no span at all.

The switch is ``AHP_TRACING`` (``wire.settings.TracingMode``): ``auto`` (the default) is on
when the environment names an exporter (``OTEL_TRACES_EXPORTER`` other than ``none``,
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); ``otlp`` is on;
``off`` is off. ``OTEL_SDK_DISABLED=true`` turns it off too. Everything else is the SDK's
own environment: the exporter's endpoint, headers, protocol and timeout
(``OTEL_EXPORTER_OTLP_*``), the batch processor (``OTEL_BSP_*``), the sampler
(``OTEL_TRACES_SAMPLER``), ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``. Without a
service name the process is named ``service`` (``ahp-worker``, ``ahp-api``...).

The SDK and the OTLP exporter come with the ``otel`` extra; a process asked to trace
without them logs that once and runs untraced.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping

from opentelemetry import trace

from .settings import Settings, TracingMode

log = logging.getLogger(__name__)

_lock = threading.Lock()
_configured_pid: int | None = None


def tracing_wanted(settings: Settings, environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process should set the SDK up (see the module's docstring)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if settings.tracing is TracingMode.OFF:
        return False
    if settings.tracing is TracingMode.OTLP:
        return True
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def configure_tracing(settings: Settings, service: str) -> bool:
    """Install an SDK tracer provider exporting as ``OTEL_*`` says, once per process, when
    tracing is wanted and no provider is installed yet (an embedding program's own one
    is kept). Whether this process traces now."""
    global _configured_pid
    with _lock:
        if _configured_pid == os.getpid():
            return True
        if not tracing_wanted(settings):
            return False
        if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            return True  # the program installed its own
        try:
            provider = _provider(service)
        except ImportError as error:
            log.warning(
                "tracing is on (AHP_TRACING / OTEL_*) but the OpenTelemetry SDK is not "
                "installed (pip install 'agent-harness-protocol-celery[otel]'): %s",
                error,
            )
            return False
        trace.set_tracer_provider(provider)
        _configured_pid = os.getpid()
        return True


def _provider(service: str) -> trace.TracerProvider:
    from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    detected = OTELResourceDetector().detect()
    defaults = {} if detected.attributes.get(SERVICE_NAME) else {SERVICE_NAME: service}
    provider = TracerProvider(resource=Resource.create(defaults))
    exporters = [
        name.strip().lower()
        for name in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")
        if name.strip() and name.strip().lower() != "none"
    ] or ["otlp"]
    for name in exporters:
        exporter: SpanExporter
        if name == "console":
            exporter = ConsoleSpanExporter()
        else:
            if name != "otlp":
                log.warning("unknown OTEL_TRACES_EXPORTER %r: exporting by OTLP instead", name)
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def flush_tracing(timeout_ms: int = 5000) -> None:
    """Export the spans still buffered in this process (before it exits by a path that
    skips ``atexit``: a prefork child, a stopping runtime). Without the SDK, nothing."""
    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if flush is not None:
        try:
            flush(timeout_ms)
        except Exception as error:
            log.warning("could not export the last spans: %s", error)


__all__ = ["configure_tracing", "flush_tracing", "tracing_wanted"]
