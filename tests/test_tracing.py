"""OpenTelemetry traces of a task, in this process (the harness and the in-process worker).

One trace per task: the caller's span, ``ahp.start_task``, the message's ``publish``, the
worker's ``process`` of it, ``ahp.claim``, ``ahp.turn``, the model call (with its token
usage) and ``ahp.settle``, then the handle's ``ahp.task_outcome``. Without a tracer
provider nothing is built and the run message carries no trace header; a malformed trace
header never fails a task. (Across OS processes: ``tests/test_tracing_processes.py``.)
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import harness.spans
import wire.message_spans
import workers.call_spans
import workers.spans
from harness import CeleryHarness
from wire.celery_config import START_PRIORITY
from wire.keys import Keys
from wire.records import TaskField
from wire.run_envelope import queue_list
from wire.settings import Settings
from wire.tracing_context import active, context_from, stored_context

from .support.boundary import ModelBoundary
from .support.tracing import (
    assert_connected,
    local_spans,
    named,
    traced_process,
    wait_for_spans,
)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    with traced_process() as spans:
        yield spans


def _messages(sync_redis: redis.Redis, queue: str) -> list[dict[str, Any]]:
    return [
        json.loads(raw)
        for name in Keys.broker_queue_lists(queue)
        for raw in sync_redis.lrange(name, 0, -1)
    ]


async def test_a_completed_task_is_one_trace_from_the_caller_to_the_model_call(
    settings: Settings, boundary: ModelBoundary, exporter: InMemorySpanExporter
) -> None:
    async with CeleryHarness(settings, profile="metered", run_metadata=boundary.run_metadata) as h:
        session = await h.create_session(SessionSpec())
        with trace.get_tracer("test").start_as_current_span("caller"):
            task = await session.start_task(TaskRequest(TextInput("trace me")))
        outcome = await asyncio.wait_for(task.await_outcome(), 30)
    assert isinstance(outcome, Completed), outcome
    task_id = task.id.value
    spans = wait_for_spans(
        lambda: local_spans(exporter),
        lambda seen: (
            bool(named(seen, "ahp.task_outcome"))
            and any(span.name.startswith("process ") for span in seen)
        ),
    )
    (root,) = named(spans, "caller")
    (model,) = [span for span in spans if span.name.startswith("chat ")]
    names = assert_connected(spans, model, root)
    assert [name.split(":", 1)[1] for name in names] == [
        "chat ahp-controlled-model",
        "ahp.turn",
        f"process {settings.queue}",
        f"publish {settings.queue}",
        "ahp.start_task",
        "caller",
    ]
    assert model.kind == "CLIENT"
    assert model.attributes["gen_ai.operation.name"] == "chat"
    assert model.attributes["gen_ai.request.model"] == "ahp-controlled-model"
    assert model.attributes["gen_ai.usage.input_tokens"] == 7
    assert model.attributes["gen_ai.usage.output_tokens"] == 3
    (process,) = [span for span in spans if span.name.startswith("process ")]
    assert process.kind == "CONSUMER"
    assert process.attributes["messaging.system"] == "celery"
    assert process.attributes["messaging.destination.name"] == settings.queue
    assert process.attributes["messaging.operation"] == "process"
    assert process.attributes["ahp.task_id"] == task_id
    assert process.attributes["ahp.session_id"] == session.id.value
    assert process.attributes["ahp.outcome"] == "completed"
    (publish,) = [span for span in spans if span.name.startswith("publish ")]
    assert publish.kind == "PRODUCER"
    assert publish.attributes["messaging.operation"] == "publish"
    (claim,) = named(spans, "ahp.claim")
    assert claim.parent_id == process.span_id
    assert claim.attributes["ahp.claim.result"] == "claimed"
    (settle,) = named(spans, "ahp.settle")
    assert settle.parent_id == process.span_id
    assert settle.attributes["ahp.outcome"] == "completed"
    (turn,) = named(spans, "ahp.turn")
    assert ("langgraph.step", {"langgraph.node": "model"}) in turn.events
    (start,) = named(spans, "ahp.start_task")
    (observed,) = named(spans, "ahp.task_outcome")
    assert observed.parent_id == start.span_id
    assert observed.attributes["ahp.outcome"] == "completed"
    assert observed.attributes["ahp.task_id"] == task_id


async def test_the_task_record_keeps_the_trace_and_the_message_carries_it(
    idle_queue_settings: Settings, sync_redis: redis.Redis, exporter: InMemorySpanExporter
) -> None:
    """Nobody serves the queue: the message stays there to be read."""
    async with CeleryHarness(idle_queue_settings) as h:
        session = await h.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("stays queued")))
        (message,) = _messages(sync_redis, idle_queue_settings.queue)
        stored = sync_redis.hget(Keys(idle_queue_settings.namespace).task(task.id.value), "trace")
        await task.request_cancellation()
    header = context_from(message["headers"])
    assert header is not None
    publish = trace.get_current_span(header).get_span_context()
    record = stored_context(stored)
    assert record is not None
    start = trace.get_current_span(record).get_span_context()
    spans = local_spans(exporter)
    (start_span,) = named(spans, "ahp.start_task")
    (publish_span,) = [span for span in spans if span.name.startswith("publish ")]
    assert f"{start.span_id:016x}" == start_span.span_id
    assert f"{publish.span_id:016x}" == publish_span.span_id
    assert start.trace_id == publish.trace_id


async def test_without_a_tracer_provider_nothing_is_built_and_no_header_is_sent(
    settings: Settings,
    idle_queue_settings: Settings,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not active()

    def refused() -> None:
        raise AssertionError("a span was built while tracing is off")

    for module in (harness.spans, wire.message_spans, workers.spans, workers.call_spans):
        monkeypatch.setattr(module, "tracer", refused)
    async with CeleryHarness(idle_queue_settings) as h:
        session = await h.create_session(SessionSpec())
        queued = await session.start_task(TaskRequest(TextInput("stays queued")))
        (message,) = _messages(sync_redis, idle_queue_settings.queue)
        await queued.request_cancellation()
    assert not {"traceparent", "tracestate"} & set(message["headers"])
    keys = Keys(settings.namespace)
    assert sync_redis.hget(keys.task(queued.id.value), TaskField.TRACE) is None
    # A whole run, on the worker too, builds no span.
    async with CeleryHarness(settings, profile="metered", run_metadata=boundary.run_metadata) as h:
        session = await h.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("untraced")))
        assert isinstance(await asyncio.wait_for(task.await_outcome(), 30), Completed)


def _with_trace_header(envelope: dict[str, Any], value: object) -> str:
    headers = dict(envelope["headers"])
    headers["traceparent"] = value
    headers["tracestate"] = {"not": "a string"}
    return json.dumps({**envelope, "headers": headers})


@pytest.mark.parametrize(
    "value",
    ["00-nonsense", 5, None, "00-" + "f" * 32 + "-" + "0" * 16 + "-01", "x" * 10_000],
    ids=["garbage", "number", "null", "invalid-span", "oversized"],
)
async def test_a_malformed_trace_header_does_not_fail_the_task(
    settings: Settings,
    idle_queue_settings: Settings,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
    exporter: InMemorySpanExporter,
    value: object,
) -> None:
    """The start's message is moved, its trace header spoiled, to the served queue: the
    worker runs the task, in the trace the task record keeps."""
    async with CeleryHarness(
        idle_queue_settings, profile="metered", run_metadata=boundary.run_metadata
    ) as h:
        session = await h.create_session(SessionSpec())
        with trace.get_tracer("test").start_as_current_span("caller"):
            task = await session.start_task(TaskRequest(TextInput("spoiled header")))
        (name,) = [
            name
            for name in Keys.broker_queue_lists(idle_queue_settings.queue)
            if sync_redis.llen(name)
        ]
        raw = sync_redis.rpop(name)
        assert isinstance(raw, str)
        sync_redis.lpush(
            queue_list(settings.queue, START_PRIORITY), _with_trace_header(json.loads(raw), value)
        )
        outcome = await asyncio.wait_for(task.await_outcome(), 30)
    assert isinstance(outcome, Completed), outcome
    spans = wait_for_spans(
        lambda: local_spans(exporter),
        # A parent ends after its children: the delivery's span ends last.
        lambda seen: (
            any(span.name.startswith("chat ") for span in seen)
            and any(span.name.startswith("process ") for span in seen)
        ),
    )
    (root,) = named(spans, "caller")
    (model,) = [span for span in spans if span.name.startswith("chat ")]
    names = assert_connected(spans, model, root)
    # The record's context: the start's span, not the lost publish's.
    assert [name.split(":", 1)[1].split(" ")[0] for name in names][2:] == [
        "process",
        "ahp.start_task",
        "caller",
    ]


def test_a_malformed_trace_context_reads_as_none() -> None:
    for headers in (
        None,
        {},
        {"traceparent": 5},
        {"traceparent": "00-zz"},
        {"traceparent": "00-" + "0" * 32 + "-" + "1" * 16 + "-01"},
    ):
        assert context_from(headers) is None  # type: ignore[arg-type]
    for stored in (None, "", "not json", "[1]", '{"traceparent": 1}', "{" * 5000, b"\xff"):
        assert stored_context(stored) is None
    good = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    assert context_from({"traceparent": good, "tracestate": 7}) is not None
    assert (
        stored_context(
            base64.b64decode(base64.b64encode(json.dumps({"traceparent": good}).encode()))
        )
        is not None
    )
