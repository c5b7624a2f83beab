"""Safeguards (seed 001) on real workers: each fires with its outcome, the partial output
and the usage acquired; the effects that did (and did not) happen are read from what the
tools recorded in the worker, the model calls from the controlled model."""

from __future__ import annotations

import asyncio

import pytest
from agent_harness_protocol import (
    AgentUsage,
    Completed,
    Failed,
    FailureKind,
    SessionSpec,
    StopReason,
    TaskOutcome,
    TaskRequest,
    TextInput,
    TextOutput,
)

from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.fault_pool import Pool
from .support.fixtures import scoped_harness
from .support.waiting import wait_for

PER_CALL = AgentUsage(input_tokens=7, output_tokens=3, total_tokens=10)


def _tool_call(label: str, text: str | None = None) -> dict[str, object]:
    return {"op": "tool_call", "name": "record_effect", "args": {"label": label}, "text": text}


async def _run(
    settings: Settings, boundary: ModelBoundary, profile: str, script: list[dict[str, object]]
) -> tuple[str, TaskOutcome]:
    harness = scoped_harness(settings, boundary, profile)
    async with harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput(f"safeguard {profile}")))
        for command in script:
            boundary.script(task.id.value, command)
        outcome = await asyncio.wait_for(task.await_outcome(), 60)
        return task.id.value, outcome


def _labels(boundary: ModelBoundary, task_id: str) -> list[object]:
    return [effect["args"]["label"] for effect in boundary.effects_for(task_id)]


async def test_the_step_limit_ends_completed_iteration_limit_with_the_partial_output(
    settings: Settings, boundary: ModelBoundary
) -> None:
    task_id, outcome = await _run(
        settings,
        boundary,
        "step-limited",  # two model calls per task
        [
            _tool_call("a", "first step"),
            _tool_call("b", "second step"),
            {"op": "complete", "text": "a third call never happens"},
        ],
    )
    assert isinstance(outcome, Completed)
    assert outcome.stop_reason is StopReason.ITERATION_LIMIT
    assert outcome.output == TextOutput("first step\n\nsecond step", complete=False)
    assert outcome.usage == PER_CALL + PER_CALL
    assert len(boundary.calls_for(task_id)) == 2
    assert _labels(boundary, task_id) == ["a", "b"]


async def test_a_repeated_action_ends_completed_loop_detected_before_it_runs_again(
    settings: Settings, boundary: ModelBoundary
) -> None:
    task_id, outcome = await _run(
        settings,
        boundary,
        "loop-guarded",  # the same action twice within four is a loop
        [
            _tool_call("same", "trying"),
            _tool_call("same", "trying again"),
            {"op": "complete", "text": "never reached"},
        ],
    )
    assert isinstance(outcome, Completed)
    assert outcome.stop_reason is StopReason.LOOP_DETECTED
    assert outcome.output == TextOutput("trying\n\ntrying again", complete=False)
    assert outcome.usage == PER_CALL + PER_CALL
    assert _labels(boundary, task_id) == ["same"]
    assert len(boundary.calls_for(task_id)) == 2


async def test_different_actions_are_not_a_loop(
    settings: Settings, boundary: ModelBoundary
) -> None:
    task_id, outcome = await _run(
        settings,
        boundary,
        "loop-guarded",
        [_tool_call("one"), _tool_call("two"), {"op": "complete", "text": "done"}],
    )
    assert isinstance(outcome, Completed)
    assert outcome.stop_reason is StopReason.FINISHED
    assert _labels(boundary, task_id) == ["one", "two"]


async def test_an_exceeded_token_budget_ends_failed_budget_exceeded_before_the_next_effect(
    settings: Settings, boundary: ModelBoundary
) -> None:
    task_id, outcome = await _run(
        settings,
        boundary,
        "budgeted",  # 25 tokens; each call uses 10
        [
            _tool_call("a", "one"),
            _tool_call("b", "two"),
            _tool_call("c", "three"),
            {"op": "complete", "text": "never reached"},
        ],
    )
    assert isinstance(outcome, Failed)
    assert outcome.kind is FailureKind.BUDGET_EXCEEDED
    assert "30" in outcome.message
    assert outcome.output == TextOutput("one\n\ntwo\n\nthree", complete=False)
    assert outcome.usage == PER_CALL + PER_CALL + PER_CALL
    # The third call went over the budget: its tool call never ran.
    assert _labels(boundary, task_id) == ["a", "b"]


async def test_an_unmeasured_call_ends_a_budgeted_task_failed_it_cannot_be_counted(
    settings: Settings, boundary: ModelBoundary
) -> None:
    task_id, outcome = await _run(
        settings,
        boundary,
        "budgeted",
        [
            {**_tool_call("a", "one"), "usage": None},
            {"op": "complete", "text": "never reached"},
        ],
    )
    assert isinstance(outcome, Failed)
    assert outcome.kind is FailureKind.BUDGET_EXCEEDED
    assert outcome.usage == AgentUsage.UNKNOWN
    assert _labels(boundary, task_id) == []


# -- counters in the checkpoint ------------------------------------------------------------


@pytest.mark.processes
async def test_safeguard_counters_survive_a_worker_killed_mid_task(
    fault_pool: Pool, boundary: ModelBoundary
) -> None:
    """Max two model calls. The worker is SIGKILLed in the task's second model call; the
    resumed run on another worker continues from the checkpoint, which holds both steps:
    its model call (the second, again) is the last one allowed."""
    settings = fault_pool.settings
    harness = scoped_harness(settings, boundary, "step-limited")
    async with harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("killed mid-task")))
        task_id = task.id.value
        boundary.script(task_id, _tool_call("a", "first step"))
        await wait_for(lambda: len(boundary.calls_for(task_id)) >= 2)
        pid = int(str(boundary.calls_for(task_id)[1]["pid"]))
        await asyncio.to_thread(fault_pool.replace, fault_pool.owner_of(pid))
        boundary.script(task_id, _tool_call("b", "second step"))
        boundary.script(task_id, {"op": "complete", "text": "a third call never happens"})
        outcome = await asyncio.wait_for(task.await_outcome(), 60)

    assert isinstance(outcome, Completed)
    assert outcome.stop_reason is StopReason.ITERATION_LIMIT
    # The lost run's first step came from the checkpoint: its text is in the partial output.
    assert outcome.output == TextOutput("first step\n\nsecond step", complete=False)
    assert outcome.usage.total_tokens is None  # the lost run's usage was never measured
    assert _labels(boundary, task_id) == ["a", "b"]
    assert len(boundary.calls_for(task_id)) == 3
