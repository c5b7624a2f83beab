"""The agent loop on real workers: model -> tools -> model, with each tool's effect
recorded by the tool itself in the worker (``tests.support.tools``) and each model call by
the controlled model; events checked against those observations."""

from __future__ import annotations

import asyncio
import json

from agent_harness_protocol import (
    AgentUsage,
    ApprovalRequirement,
    Cancelled,
    Completed,
    MessageCompleted,
    MessageRole,
    SessionRequirements,
    SessionSpec,
    TaskEvent,
    TaskRequest,
    TextInput,
    TextOutput,
    ToolCallChanged,
    UsageChanged,
    WorkStatus,
)

from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.fixtures import scoped_harness
from .support.waiting import wait_for

MEASURED = AgentUsage(input_tokens=7, output_tokens=3, total_tokens=10)


async def _collect(events: object) -> list[TaskEvent]:
    return [event async for event in events]  # type: ignore[attr-defined]


def _tool_events(events: list[TaskEvent]) -> list[ToolCallChanged]:
    return [event for event in events if isinstance(event, ToolCallChanged)]


async def test_a_tool_call_runs_its_effect_once_and_the_model_sees_its_result(
    settings: Settings, boundary: ModelBoundary
) -> None:
    harness = scoped_harness(settings, boundary, "agent")
    async with harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("use the tool")))
        events = asyncio.create_task(_collect(task.events()))
        task_id = task.id.value
        boundary.script(task_id, {"op": "delta", "text": "Recording it. "})
        boundary.script(
            task_id,
            {"op": "tool_call", "name": "record_effect", "args": {"label": "alpha"}, "id": "c-1"},
        )
        boundary.script(task_id, {"op": "delta", "text": "Done: "})
        boundary.script(task_id, {"op": "complete", "text": "recorded alpha."})
        outcome = await asyncio.wait_for(task.await_outcome(), 60)
        seen = await asyncio.wait_for(events, 10)

    assert isinstance(outcome, Completed)
    assert isinstance(outcome.output, TextOutput)
    assert outcome.output.text == "Done: recorded alpha."
    # Two model calls, 10 tokens each, added up.
    assert outcome.usage == MEASURED + MEASURED
    effects = boundary.effects_for(task_id)
    assert [effect["args"] for effect in effects] == [{"label": "alpha"}]
    calls = boundary.calls_for(task_id)
    assert len(calls) == 2
    assert "recorded alpha" in calls[1]["texts"]  # type: ignore[operator]

    tools = _tool_events(seen)
    assert [(event.work_id.value, event.status) for event in tools] == [
        ("c-1", WorkStatus.STARTED),
        ("c-1", WorkStatus.COMPLETED),
    ]
    assert json.loads(tools[0].arguments or "") == {"label": "alpha"}
    assert tools[1].result == "recorded alpha"
    messages = [event for event in seen if isinstance(event, MessageCompleted)]
    assert [(message.role, message.text) for message in messages] == [
        (MessageRole.COMMENTARY, "Recording it. "),
        (MessageRole.ANSWER, "Done: recorded alpha."),
    ]
    usage = [event.task for event in seen if isinstance(event, UsageChanged)]
    assert usage == [MEASURED, MEASURED + MEASURED]


async def test_a_failing_tool_is_reported_failed_and_its_error_goes_back_to_the_model(
    settings: Settings, boundary: ModelBoundary
) -> None:
    harness = scoped_harness(settings, boundary, "agent")
    async with harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("use the failing tool")))
        events = asyncio.create_task(_collect(task.events()))
        task_id = task.id.value
        boundary.script(
            task_id, {"op": "tool_call", "name": "failing_tool", "args": {"label": "beta"}}
        )
        boundary.script(task_id, {"op": "complete", "text": "it failed"})
        outcome = await asyncio.wait_for(task.await_outcome(), 60)
        seen = await asyncio.wait_for(events, 10)

    assert isinstance(outcome, Completed)
    assert [effect["tool"] for effect in boundary.effects_for(task_id)] == ["failing_tool"]
    tools = _tool_events(seen)
    assert [event.status for event in tools] == [WorkStatus.STARTED, WorkStatus.FAILED]
    assert "failing_tool refused beta" in (tools[1].error or "")
    second_call = boundary.calls_for(task_id)[1]
    assert any("failing_tool refused beta" in text for text in second_call["texts"])  # type: ignore[attr-defined]


async def test_an_approval_gated_tool_in_a_session_denying_approvals_is_declined_without_effect(
    settings: Settings, boundary: ModelBoundary
) -> None:
    harness = scoped_harness(settings, boundary, "agent")
    async with harness:
        session = await harness.create_session(
            SessionSpec(requirements=SessionRequirements(approval=ApprovalRequirement.DENY_ALL))
        )
        task = await session.start_task(TaskRequest(TextInput("use the guarded tool")))
        events = asyncio.create_task(_collect(task.events()))
        task_id = task.id.value
        boundary.script(
            task_id, {"op": "tool_call", "name": "guarded_effect", "args": {"label": "gamma"}}
        )
        boundary.script(task_id, {"op": "complete", "text": "not allowed"})
        outcome = await asyncio.wait_for(task.await_outcome(), 60)
        seen = await asyncio.wait_for(events, 10)

    assert isinstance(outcome, Completed)
    assert boundary.effects_for(task_id) == []
    assert [event.status for event in _tool_events(seen)] == [WorkStatus.DECLINED]
    second_call = boundary.calls_for(task_id)[1]
    assert any("declined" in text for text in second_call["texts"])  # type: ignore[attr-defined]


async def test_a_cancellation_recorded_before_a_tool_effect_stops_the_run_before_it(
    settings: Settings, boundary: ModelBoundary
) -> None:
    """The model call disregards the cancellation and finishes with a tool call
    (completion wins); the tool's effect must still not happen: the gate before it reads
    the recorded cancellation."""
    harness = scoped_harness(settings, boundary, "agent")
    async with harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("cancel before the tool")))
        task_id = task.id.value
        boundary.deafen()
        await wait_for(lambda: boundary.calls_for(task_id))
        await task.request_cancellation()
        await wait_for(lambda: boundary.was_cancelled(task_id))
        boundary.script(
            task_id, {"op": "tool_call", "name": "record_effect", "args": {"label": "late"}}
        )
        outcome = await asyncio.wait_for(task.await_outcome(), 60)

    assert isinstance(outcome, Cancelled)
    # The model call finished and was measured; the run stopped at the tool's gate.
    assert outcome.usage == MEASURED
    assert boundary.effects_for(task_id) == []
    assert len(boundary.calls_for(task_id)) == 1
