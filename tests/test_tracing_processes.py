"""One connected trace across three OS processes: the caller (this test), the HTTP API
(``ahp-celery api``) and a worker (``celery worker``).

The caller's spans go to an in-memory exporter here; the API and the worker export by
the standard OTLP/HTTP exporter (``OTEL_EXPORTER_OTLP_ENDPOINT``) to a receiver in this
test. For a completed, a cancelled, an approved task and one resumed after its worker was
SIGKILLed, the model call's span leads, parent by parent and in one trace, to the
caller's own span.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tooling.worker_process import WorkerProcess
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings
from wire.tracing_context import carrier

from .support.api import api_process, auth
from .support.boundary import ModelBoundary
from .support.tracing import (
    OtlpReceiver,
    SeenSpan,
    assert_connected,
    local_spans,
    named,
    traced_process,
    wait_for_spans,
)
from .support.waiting import wait_for

pytestmark = pytest.mark.processes


@dataclass
class Traced:
    settings: Settings
    client: httpx.AsyncClient
    receiver: OtlpReceiver
    exporter: InMemorySpanExporter
    worker: WorkerProcess

    def spans(self) -> list[SeenSpan]:
        return local_spans(self.exporter) + self.receiver.received()

    async def call(self, method: str, url: str, **options: Any) -> httpx.Response:
        """A request of the caller, in its own span ``caller``'s trace."""
        headers = {**auth(), **carrier()}
        return await self.client.request(method, url, headers=headers, **options)


@asynccontextmanager
async def traced_deployment(
    settings: Settings, tmp_path: Path, profile: str
) -> AsyncIterator[Traced]:
    """A queue of its own served by one worker process; an API process on it with
    ``profile``; both exporting to a receiver here, this process to memory."""
    own = settings.model_copy(update={"queue": f"{settings.queue}.traced.{uuid4().hex[:6]}"})
    with OtlpReceiver() as receiver, traced_process() as exporter:
        worker = WorkerProcess(
            own,
            concurrency=2,
            loglevel="warning",
            name="traced",
            extra_env=receiver.environment("ahp-worker"),
        )
        worker.start()
        try:
            environment = {**receiver.environment("ahp-api"), "AHP_PROFILE": profile}
            async with (
                api_process(own, tmp_path / "api.log", environment) as api,
                httpx.AsyncClient(base_url=api.url, timeout=60) as client,
            ):
                yield Traced(own, client, receiver, exporter, worker)
        finally:
            worker.stop()


def _model_calls(spans: Sequence[SeenSpan]) -> list[SeenSpan]:
    return [span for span in spans if span.name.startswith("chat ")]


def _services(names: Sequence[str]) -> set[str]:
    return {name.split(":", 1)[0] for name in names}


def _done(task_id: str, *, model_calls: int = 1) -> Any:
    def ready(spans: Sequence[SeenSpan]) -> bool:
        return (
            len(_model_calls(spans)) >= model_calls
            and any(
                span.name == "ahp.task_outcome" and span.attributes.get("ahp.task_id") == task_id
                for span in spans
            )
            and any(
                span.name.startswith("process ") and "ahp.outcome" in span.attributes
                for span in spans
            )
        )

    return ready


async def test_a_completed_task_is_one_trace_across_caller_api_and_worker(
    settings: Settings, boundary: ModelBoundary, tmp_path: Path
) -> None:
    async with traced_deployment(settings, tmp_path, "metered") as traced:
        with trace.get_tracer("test").start_as_current_span("caller"):
            response = await traced.call(
                "POST", "/v1/tasks", json={"input": "traced"}, params={"wait": 30}
            )
        assert response.status_code == 201, response.text
        task = response.json()
        assert task["state"] == "completed", task
        spans = wait_for_spans(traced.spans, _done(task["id"]))
    (root,) = named(spans, "caller")
    (model,) = _model_calls(spans)
    names = assert_connected(spans, model, root)
    assert names[0] == "ahp-worker:chat ahp-controlled-model"
    assert "ahp-api:POST /v1/tasks" in names
    assert "ahp-api:ahp.start_task" in names
    assert _services(names) == {"ahp-worker", "ahp-api", "test-caller"}
    assert model.attributes["gen_ai.usage.input_tokens"] == 7
    assert model.attributes["gen_ai.usage.output_tokens"] == 3
    (observed,) = named(spans, "ahp.task_outcome")
    assert observed.service == "ahp-api"
    assert observed.attributes["ahp.outcome"] == "completed"
    assert observed.trace_id == root.trace_id
    (process,) = [span for span in spans if span.name.startswith("process ")]
    assert process.attributes["ahp.outcome"] == "completed"
    assert process.attributes["ahp.tenant"] == "alpha"


async def test_a_cancelled_task_is_one_trace_across_caller_api_and_worker(
    settings: Settings, boundary: ModelBoundary, tmp_path: Path
) -> None:
    boundary.hold()
    async with traced_deployment(settings, tmp_path, "confirmed") as traced:
        with trace.get_tracer("test").start_as_current_span("caller"):
            response = await traced.call("POST", "/v1/tasks", json={"input": "to cancel"})
            assert response.status_code == 201, response.text
            task_id = response.json()["id"]
            await wait_for(lambda: boundary.calls_for(task_id), within=30)
            cancelled = await traced.call("POST", f"/v1/tasks/{task_id}/cancel")
            assert cancelled.status_code == 202, cancelled.text
            settled = await traced.call("GET", f"/v1/tasks/{task_id}", params={"wait": 30})
        assert settled.json()["state"] == "cancelled", settled.text
        spans = wait_for_spans(traced.spans, _done(task_id))
    (root,) = named(spans, "caller")
    (model,) = _model_calls(spans)
    names = assert_connected(spans, model, root)
    assert _services(names) == {"ahp-worker", "ahp-api", "test-caller"}
    (process,) = [span for span in spans if span.name.startswith("process ")]
    assert process.attributes["ahp.outcome"] == "cancelled"
    (settle,) = named(spans, "ahp.settle")
    assert settle.attributes["ahp.outcome"] == "cancelled"
    (observed,) = named(spans, "ahp.task_outcome")
    assert observed.attributes["ahp.outcome"] == "cancelled"


async def test_an_approved_task_pauses_and_resumes_in_one_trace(
    settings: Settings, boundary: ModelBoundary, tmp_path: Path
) -> None:
    async with traced_deployment(settings, tmp_path, "guarding") as traced:
        with trace.get_tracer("test").start_as_current_span("caller"):
            session = await traced.call("POST", "/v1/sessions", json={})
            session_id = session.json()["id"]
            started = await traced.call(
                "POST", f"/v1/sessions/{session_id}/tasks", json={"input": "guarded"}
            )
            task_id = started.json()["id"]
            async with asyncio.timeout(30):
                while True:
                    task = (await traced.call("GET", f"/v1/tasks/{task_id}")).json()
                    if task["state"] == "awaiting_response":
                        break
                    await asyncio.sleep(0.05)
        (pending,) = task["pending_interactions"]
        # The approval comes in a trace of its own (another request, later): the resume
        # still runs in the task's trace, linked to the request that answered.
        with trace.get_tracer("test").start_as_current_span("approver") as approver:
            answered = await traced.call(
                "POST",
                f"/v1/tasks/{task_id}/interactions/{pending['interaction_id']}",
                json={"response": {"kind": "approval", "decision": "approve_once"}},
            )
            assert answered.status_code == 200, answered.text
        settled = await traced.call("GET", f"/v1/tasks/{task_id}", params={"wait": 30})
        assert settled.json()["state"] == "completed", settled.text
        spans = wait_for_spans(
            traced.spans,
            lambda seen: (
                len(_model_calls(seen)) >= 2
                and bool(named(seen, "ahp.resume"))
                and bool(named(seen, "ahp.task_outcome"))
                and len([s for s in seen if s.name.startswith("process ")]) >= 2
            ),
        )
    (root,) = named(spans, "caller")
    deliveries = [span for span in spans if span.name.startswith("process ")]
    assert len(deliveries) == 2
    paused = [span for span in deliveries if "ahp.outcome" not in span.attributes]
    (first,) = paused
    (event,) = [event for event in first.events if event[0] == "ahp.awaiting_response"]
    assert event[1]["ahp.interaction_ids"] == (pending["interaction_id"],)
    # The tool call that asked (its span ends paused), and its run after the approval.
    asked, ran = sorted(
        (span for span in spans if span.name == "execute_tool guarded_effect"),
        key=lambda span: not span.attributes.get("ahp.paused"),
    )
    assert asked.attributes.get("ahp.paused") is True
    assert "ahp.paused" not in ran.attributes
    assert ran.attributes["gen_ai.tool.name"] == "guarded_effect"
    for model in [*_model_calls(spans), asked, ran]:  # before the pause and after it
        names = assert_connected(spans, model, root)
        assert _services(names) == {"ahp-worker", "ahp-api", "test-caller"}
    (resume,) = named(spans, "ahp.resume")
    assert resume.trace_id == root.trace_id
    assert f"{approver.get_span_context().trace_id:032x}" != root.trace_id
    assert resume.links  # to the request that answered
    (resumed,) = [span for span in deliveries if span is not first]
    assert resumed.attributes["ahp.outcome"] == "completed"
    assert "ahp.resume" in [
        name.split(":", 1)[1] for name in assert_connected(spans, resumed, root)
    ]


async def test_a_task_resumed_after_its_worker_was_sigkilled_stays_in_its_trace(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """The in-process worker's sweeper (this process) recovers the lapsed lease and
    publishes the task again, in its trace (the record's); a new worker process runs it."""
    boundary.hold()
    keys = Keys(settings.namespace)
    async with traced_deployment(settings, tmp_path, "confirmed") as traced:
        with trace.get_tracer("test").start_as_current_span("caller"):
            response = await traced.call("POST", "/v1/tasks", json={"input": "lost"})
            task_id = response.json()["id"]
            await wait_for(lambda: boundary.calls_for(task_id), within=30)
        traced.worker.kill()
        await wait_for(
            lambda: sync_redis.hget(keys.task(task_id), TaskField.RECOVERIES) == "1", within=60
        )
        boundary.release()
        with WorkerProcess(
            traced.settings,
            concurrency=2,
            loglevel="warning",
            name="traced-b",
            extra_env=traced.receiver.environment("ahp-worker-b"),
        ):
            settled = await traced.call("GET", f"/v1/tasks/{task_id}", params={"wait": 60})
            assert settled.json()["state"] == "completed", settled.text
            spans = wait_for_spans(
                traced.spans,
                lambda seen: (
                    any(s.service == "ahp-worker-b" and s.name.startswith("chat ") for s in seen)
                    # A parent ends after its children: the delivery's span ends last.
                    and any(
                        s.service == "ahp-worker-b" and s.name.startswith("process ") for s in seen
                    )
                    and bool(named(seen, "ahp.task_outcome"))
                ),
            )
    (root,) = named(spans, "caller")
    (resumed,) = [s for s in _model_calls(spans) if s.service == "ahp-worker-b"]
    names = assert_connected(spans, resumed, root)
    assert {"ahp-worker-b", "test-caller", "ahp-api"} <= _services(names)
    # The sweeper's publish, in this process, sits between the API's start and the run.
    republish = next(name for name in names if name.startswith("test-caller:publish "))
    assert names.index(republish) < names.index("ahp-api:ahp.start_task")
    (observed,) = named(spans, "ahp.task_outcome")
    assert observed.attributes["ahp.outcome"] == "completed"
    assert observed.trace_id == root.trace_id
