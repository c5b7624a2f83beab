"""Who sets OpenTelemetry's SDK up: the deployment's processes when AHP_TRACING / OTEL_*
ask for it, never a harness used as a library."""

from __future__ import annotations

import pytest
from agent_harness_protocol import SessionSpec, TaskRequest, TextInput
from opentelemetry import trace

from harness import CeleryHarness
from wire.settings import Settings, TracingMode
from wire.tracing_setup import tracing_wanted

from .support.tracing import traced_process

ENDPOINT = "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("mode", "environ", "wanted"),
    [
        (TracingMode.AUTO, {}, False),
        (TracingMode.AUTO, {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
        (TracingMode.AUTO, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT}, True),
        (TracingMode.AUTO, {"OTEL_TRACES_EXPORTER": "otlp"}, True),
        (TracingMode.AUTO, {"OTEL_TRACES_EXPORTER": "none"}, False),
        (
            TracingMode.AUTO,
            {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT},
            False,
        ),
        (TracingMode.OTLP, {}, True),
        (TracingMode.OTLP, {"OTEL_SDK_DISABLED": "true"}, False),
        (TracingMode.OFF, {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, False),
    ],
)
def test_the_switch_follows_ahp_tracing_and_the_standard_environment(
    mode: TracingMode, environ: dict[str, str], wanted: bool
) -> None:
    assert tracing_wanted(Settings(tracing=mode), environ) is wanted


def test_ahp_tracing_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AHP_TRACING", "otlp")
    assert Settings().tracing is TracingMode.OTLP
    monkeypatch.setenv("AHP_TRACING", "jaeger")
    with pytest.raises(ValueError, match="tracing"):
        Settings()


async def test_a_harness_never_installs_a_tracer_provider(
    idle_queue_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even with the environment asking for OTLP export: the program decides."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ENDPOINT)
    monkeypatch.setenv("AHP_TRACING", "otlp")
    async with CeleryHarness(idle_queue_settings) as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("untraced caller")))
        await task.request_cancellation()
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def test_the_worker_keeps_a_provider_its_program_installed() -> None:
    from wire.tracing_setup import configure_tracing

    with traced_process():
        installed = trace.get_tracer_provider()
        assert configure_tracing(Settings(tracing=TracingMode.OTLP), "ahp-worker")
        assert trace.get_tracer_provider() is installed


def test_the_test_helper_resets_globals_opentelemetry_still_has() -> None:
    """``tests.support.tracing.traced_process`` resets OpenTelemetry's private globals, as
    its own test helpers do; a release that renames them fails here, not as a trace that
    went to another test's exporter."""
    from opentelemetry.util._once import Once

    assert isinstance(trace._TRACER_PROVIDER_SET_ONCE, Once)  # type: ignore[attr-defined]
    assert hasattr(trace, "_TRACER_PROVIDER")
