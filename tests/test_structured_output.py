"""Structured output through real workers: the schema reaches the model, the worker
judges the answer with the real validator before settling, and every observer reports
that one judgment. Only the chat model is controlled (scripted per task)."""

from __future__ import annotations

import json

import pytest
from agent_harness_protocol import (
    SUPPORTED,
    Capability,
    CompatibilityStatus,
    Completed,
    IncompatibleRequirementError,
    SchemaValidation,
    SessionSpec,
    StructuredOutput,
    StructuredOutputRequirement,
    TaskCompleted,
    TaskRequest,
    TaskRequirements,
    TextInput,
    Warning,
)

from harness import CeleryHarness
from harness.errors import IdempotencyKeyReusedError
from wire.settings import Settings

from .support.api import api_harness, auth, in_process, problem_of
from .support.boundary import ModelBoundary
from .support.fixtures import scoped_harness
from .support.waiting import wait_for

SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    }
)


def _structured(text: str, schema: str = SCHEMA) -> TaskRequest:
    return TaskRequest(TextInput(text), TaskRequirements(StructuredOutputRequirement(schema)))


async def _run(
    settings: Settings, boundary: ModelBoundary, text: str, answer: str
) -> tuple[Completed, list[object], str]:
    """Run one structured task whose model answers ``answer``; its outcome, its events and
    the task id."""
    async with scoped_harness(settings, boundary, "scripted") as harness:
        assert harness.support[Capability.STRUCTURED_OUTPUT] == SUPPORTED
        session = await harness.create_session(SessionSpec(instructions="AHP_STRUCTURED"))
        task = await session.start_task(_structured(text))
        events = task.events()
        boundary.script(task.id.value, {"op": "complete", "text": answer})
        outcome = await task.await_outcome()
        seen = [event async for event in events]
        assert isinstance(outcome, Completed)
        return outcome, seen, task.id.value


async def test_a_conforming_answer_is_reported_valid_by_every_observer(
    settings: Settings, boundary: ModelBoundary
) -> None:
    answer = '{"city": "Lyon", "population": 522000}'
    outcome, events, task_id = await _run(settings, boundary, "structured marker-s1", answer)
    assert outcome.output == StructuredOutput(answer, SchemaValidation.VALID)
    terminal = events[-1]
    assert isinstance(terminal, TaskCompleted)
    assert terminal.outcome == outcome
    assert not any(isinstance(event, Warning) for event in events)
    # The model was asked for this schema: the request reached it, after the session's
    # instructions and beside the task's input.
    (call,) = boundary.calls_for(task_id)
    texts = [str(text) for text in call["texts"]]  # type: ignore[attr-defined]
    assert texts[0].startswith("AHP_STRUCTURED")
    assert SCHEMA in texts[0]
    assert texts[-1] == "structured marker-s1"


async def test_a_nonconforming_answer_is_reported_invalid_with_its_problems(
    settings: Settings, boundary: ModelBoundary
) -> None:
    answer = '{"city": "Lyon", "population": "about half a million"}'
    outcome, events, _ = await _run(settings, boundary, "structured marker-s2", answer)
    assert outcome.output == StructuredOutput(answer, SchemaValidation.INVALID)
    (warning,) = [event for event in events if isinstance(event, Warning)]
    assert "does not conform" in warning.message
    assert "$.population: 'about half a million' is not of type 'integer'" in warning.message
    terminal = events[-1]
    assert isinstance(terminal, TaskCompleted)
    assert terminal.outcome == outcome


async def test_an_answer_that_is_not_json_at_all_is_reported_invalid_never_passed(
    settings: Settings, boundary: ModelBoundary
) -> None:
    answer = "Lyon has roughly half a million inhabitants."
    outcome, events, _ = await _run(settings, boundary, "structured marker-s3", answer)
    assert outcome.output == StructuredOutput(answer, SchemaValidation.INVALID)
    (warning,) = [event for event in events if isinstance(event, Warning)]
    assert "not JSON" in warning.message


async def test_an_invalid_schema_is_refused_before_any_model_call(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with scoped_harness(settings, boundary, "scripted") as harness:
        session = await harness.create_session(SessionSpec())
        request = _structured("never sent marker-s4", '{"type": "objekt"}')
        report = session.validate(request)
        assert report.status is CompatibilityStatus.INCOMPATIBLE
        assert [issue.path for issue in report.issues] == ["requirements.output.schema"]
        with pytest.raises(IncompatibleRequirementError):
            await session.start_task(request)
        # The session is unharmed: a text task runs next.
        task = await session.start_task(TaskRequest(TextInput("text marker-s4b")))
        boundary.script(task.id.value, {"op": "complete", "text": "plain"})
        assert isinstance(await task.await_outcome(), Completed)
    assert all("marker-s4" not in text or "s4b" in text for text in boundary.observed_text_values)


async def test_structured_output_over_http_and_422_for_an_invalid_schema(
    settings: Settings, boundary: ModelBoundary
) -> None:
    harness: CeleryHarness = api_harness(settings, boundary, profile="scripted")
    async with in_process(harness) as client:
        created = await client.post("/v1/sessions", json={}, headers=auth())
        session_id = created.json()["id"]
        refused = await client.post(
            f"/v1/sessions/{session_id}/tasks",
            json={"input": "never sent marker-h5", "output_schema": {"type": 5}},
            headers=auth(),
        )
        assert refused.status_code == 422, refused.text
        problem = problem_of(refused)
        assert problem["issues"][0]["path"] == "requirements.output.schema"
        started = await client.post(
            f"/v1/sessions/{session_id}/tasks",
            json={"input": "structured marker-h6", "output_schema": json.loads(SCHEMA)},
            headers=auth(),
        )
        assert started.status_code == 201, started.text
        task_id = started.json()["id"]
        await wait_for(lambda: boundary.calls_for(task_id))
        boundary.script(task_id, {"op": "complete", "text": '{"city": "Oslo"}'})
        read = await client.get(f"/v1/tasks/{task_id}", params={"wait": 30}, headers=auth())
        assert read.json()["outcome"]["output"] == {
            "json": '{"city": "Oslo"}',
            "validation": "invalid",
            "complete": True,
        }
    assert all("marker-h5" not in text for text in boundary.observed_text_values)


async def test_an_idempotency_key_names_the_schema_too(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with scoped_harness(settings, boundary, "scripted") as harness:
        session = await harness.create_session(SessionSpec())
        first = await session.start_task(_structured("keyed marker-s7"), idempotency_key="k-s7")
        boundary.script(first.id.value, {"op": "complete", "text": "{}"})
        await first.await_outcome()
        replayed = await session.start_task(_structured("keyed marker-s7"), idempotency_key="k-s7")
        assert replayed.id == first.id
        with pytest.raises(IdempotencyKeyReusedError):
            await session.start_task(
                _structured("keyed marker-s7", '{"type": "array"}'), idempotency_key="k-s7"
            )
