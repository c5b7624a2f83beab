"""Traces under test: an in-memory exporter in this process, an OTLP/HTTP receiver for
the others, and one view of the spans of both.

This process's spans go to ``InMemorySpanExporter`` through a provider installed for one
test (:func:`traced_process`) and removed after it, as OpenTelemetry's own test helpers
do (``opentelemetry.test.globals_test.reset_trace_globals``): the API allows one
``set_tracer_provider`` per process, so the globals are reset around each test.

An API process and a worker OS process export by the standard OTLP/HTTP exporter
(``OTEL_EXPORTER_OTLP_ENDPOINT``) to :class:`OtlpReceiver`, which decodes each
``ExportTraceServiceRequest`` with ``opentelemetry-proto``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from bench.otlp_sink import OtlpHttpSink


@dataclass(frozen=True, slots=True)
class SeenSpan:
    """One finished span, from this process or another, in one shape."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    service: str
    kind: str
    attributes: Mapping[str, Any]
    events: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    links: tuple[str, ...] = ()
    """Span ids of the spans this one links to."""


def _reset_globals() -> None:
    trace_api._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace_api._TRACER_PROVIDER = None  # type: ignore[attr-defined]


@contextmanager
def traced_process(service: str = "test-caller") -> Iterator[InMemorySpanExporter]:
    """This process traces into an in-memory exporter for the test's duration."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_globals()
    trace_api.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        _reset_globals()


def _kind(kind: Any) -> str:
    return str(getattr(kind, "name", kind)).removeprefix("SPAN_KIND_").upper()


def local_spans(exporter: InMemorySpanExporter) -> list[SeenSpan]:
    return [_from_sdk(span) for span in exporter.get_finished_spans()]


def _from_sdk(span: ReadableSpan) -> SeenSpan:
    context = span.get_span_context()
    assert context is not None
    parent = span.parent
    return SeenSpan(
        name=span.name,
        trace_id=f"{context.trace_id:032x}",
        span_id=f"{context.span_id:016x}",
        parent_id=None if parent is None else f"{parent.span_id:016x}",
        service=str(span.resource.attributes.get(SERVICE_NAME, "")),
        kind=_kind(span.kind),
        attributes=dict(span.attributes or {}),
        events=tuple((event.name, dict(event.attributes or {})) for event in span.events),
        links=tuple(f"{link.context.span_id:016x}" for link in span.links),
    )


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return tuple(_value(item) for item in value.array_value.values)
    return None if which is None else getattr(value, which)


def _attributes(items: Iterable[Any]) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


@dataclass
class OtlpReceiver:
    """An OTLP/HTTP trace receiver on a free port (``endpoint``), in a thread."""

    spans: list[SeenSpan] = field(default_factory=list)
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sink: OtlpHttpSink | None = None

    @property
    def endpoint(self) -> str:
        assert self._sink is not None
        return self._sink.endpoint

    def environment(self, service: str) -> dict[str, str]:
        """What a process needs to export its spans here, quickly."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_SERVICE_NAME": service,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }

    def _receive(self, request: ExportTraceServiceRequest) -> None:
        seen: list[SeenSpan] = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    seen.append(
                        SeenSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex() or None,
                            service=str(resource.get(SERVICE_NAME, "")),
                            kind=_kind(Span.SpanKind.Name(span.kind)),
                            attributes=_attributes(span.attributes),
                            events=tuple(
                                (event.name, _attributes(event.attributes)) for event in span.events
                            ),
                            links=tuple(link.span_id.hex() for link in span.links),
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(seen)

    def __enter__(self) -> OtlpReceiver:
        self._sink = OtlpHttpSink(self._receive)
        return self

    def __exit__(self, *_: object) -> None:
        assert self._sink is not None
        self._sink.close()

    def received(self) -> list[SeenSpan]:
        with self._lock:
            return list(self.spans)


def wait_for_spans(
    sources: Callable[[], Sequence[SeenSpan]],
    ready: Callable[[Sequence[SeenSpan]], bool],
    within: float = 30.0,
) -> list[SeenSpan]:
    """Poll ``sources`` until ``ready`` holds for its spans; those spans."""
    deadline = time.monotonic() + within
    while True:
        spans = list(sources())
        if ready(spans):
            return spans
        if time.monotonic() > deadline:
            names = sorted(f"{span.service}:{span.name}" for span in spans)
            raise AssertionError(f"the spans never showed up; seen: {names}")
        time.sleep(0.05)


def named(spans: Iterable[SeenSpan], name: str) -> list[SeenSpan]:
    return [span for span in spans if span.name == name]


def chain(spans: Sequence[SeenSpan], leaf: SeenSpan) -> list[SeenSpan]:
    """``leaf`` and its ancestors, up to the root (or the first parent not seen)."""
    by_id = {span.span_id: span for span in spans}
    path = [leaf]
    while path[-1].parent_id is not None and path[-1].parent_id in by_id:
        path.append(by_id[path[-1].parent_id])
        assert len(path) < 100, "a parent cycle"
    return path


def assert_connected(spans: Sequence[SeenSpan], leaf: SeenSpan, root: SeenSpan) -> list[str]:
    """``leaf``'s parents lead, unbroken and in one trace, to ``root``; the names on the
    way (leaf first)."""
    path = chain(spans, leaf)
    names = [f"{span.service}:{span.name}" for span in path]
    assert path[-1].span_id == root.span_id, f"the chain breaks: {names}"
    assert {span.trace_id for span in path} == {root.trace_id}, names
    return names


__all__ = [
    "OtlpReceiver",
    "SeenSpan",
    "assert_connected",
    "chain",
    "local_spans",
    "named",
    "traced_process",
    "wait_for_spans",
]
