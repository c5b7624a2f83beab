"""Task pipelines (seed 002) on real workers: order, tool scoping, validators, nudges, and
a run resumed at the right step after its worker process was killed.

The ``pipeline`` profile (tests/support/profiles.py) has two steps, ``collect``
(``record_effect``, completion validated by ``requires_recorded_effect``) and
``categorize`` (``record_category``), ``failing_tool`` named by no step, and two nudges.
Its controlled model is scripted per task with tool calls. Every assertion is on what the
model received in the worker (its messages and the tools it was offered) or on the
effects the tools recorded where they ran.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest
from agent_harness_protocol import (
    Completed,
    SessionSpec,
    StopReason,
    TaskRequest,
    TextInput,
    TextOutput,
    ToolCallChanged,
    Warning,
    WorkStatus,
)

from harness import CeleryHarness
from tooling.worker_process import WorkerProcess
from wire.pipelines import STATUS_TOOL
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.fixtures import scoped_harness
from .support.steering import REJECTION
from .support.waiting import wait_for

COLLECTING = ["failing_tool", "record_effect", STATUS_TOOL]
CATEGORIZING = ["failing_tool", "record_category", STATUS_TOOL]
NO_STEP = ["failing_tool", STATUS_TOOL]


def _status(step: str, status: str) -> dict[str, object]:
    return {"op": "tool_call", "name": STATUS_TOOL, "args": {"task": step, "status": status}}


def _tool(name: str, label: str) -> dict[str, object]:
    return {"op": "tool_call", "name": name, "args": {"label": label}}


def _answer(text: str) -> dict[str, object]:
    return {"op": "complete", "text": text}


def _texts(call: dict[str, object]) -> list[str]:
    return [str(text) for text in call["texts"]]  # type: ignore[attr-defined]


def _effects(boundary: ModelBoundary, task_id: str) -> list[tuple[str, str]]:
    return [(effect["tool"], effect["args"]["label"]) for effect in boundary.effects_for(task_id)]


@dataclass(frozen=True, slots=True)
class _Run:
    outcome: Completed
    calls: list[dict[str, object]]
    """What the model received, call by call (recorded in the worker)."""
    task_id: str
    declined: list[tuple[str, str | None]]
    """The tool calls the task's events reported DECLINED: (tool, refusal)."""


async def _run(
    harness: CeleryHarness, boundary: ModelBoundary, script: list[dict[str, object]]
) -> _Run:
    """Run one task of the pipeline profile, its model following ``script``."""
    session = await harness.create_session(SessionSpec(instructions="AHP_PIPELINE"))
    task = await session.start_task(TaskRequest(TextInput("sort my items")))
    events = task.events()
    for command in script:
        boundary.script(task.id.value, command)
    outcome = await asyncio.wait_for(task.await_outcome(), 60)
    assert isinstance(outcome, Completed), outcome
    declined = [
        (event.name, event.error)
        async for event in events
        if isinstance(event, ToolCallChanged) and event.status is WorkStatus.DECLINED
    ]
    return _Run(outcome, boundary.calls_for(task.id.value), task.id.value, declined)


async def test_steps_run_in_order_each_with_its_own_tools(
    settings: Settings, boundary: ModelBoundary
) -> None:
    script = [
        _status("categorize", "in_progress"),  # refused: collect comes first
        _tool("record_category", "early"),  # refused: no step in progress
        _status("collect", "in_progress"),
        _tool("record_effect", "apple"),
        _tool("record_category", "apple"),  # refused: not collect's tool
        _status("collect", "complete"),
        _status("categorize", "in_progress"),
        _tool("record_category", "apple"),
        _status("categorize", "complete"),
        _answer("sorted"),
    ]
    async with scoped_harness(settings, boundary, "pipeline") as harness:
        run = await _run(harness, boundary, script)
    outcome, calls, task_id = run.outcome, run.calls, run.task_id
    assert outcome.output == TextOutput("sorted")
    assert len(calls) == len(script)
    # Call i answers with script[i]; it saw the results of script[:i].
    offered = [call["tools"] for call in calls]
    assert offered == [NO_STEP] * 3 + [COLLECTING] * 3 + [NO_STEP] + [CATEGORIZING] * 2 + [NO_STEP]
    assert "Cannot start 'categorize': 'collect' is not complete yet" in _texts(calls[1])[-1]
    assert "Tool 'record_category' is not available" in _texts(calls[2])[-1]
    assert "Tool 'record_category' is not available" in _texts(calls[5])[-1]
    # The active step's instruction is in the system prompt, and only while it is active.
    system = [_texts(call)[0] for call in calls]
    assert all(text.startswith("AHP_PIPELINE") for text in system)
    assert ["STEP-COLLECT" in text for text in system] == [False] * 3 + [True] * 3 + [False] * 4
    assert ["STEP-CATEGORIZE" in text for text in system] == [False] * 7 + [True] * 2 + [False]
    # Only the calls in scope had an effect, where the tools ran.
    assert _effects(boundary, task_id) == [("record_effect", "apple"), ("record_category", "apple")]
    # The refused calls were reported to the caller as declined, with the refusal.
    assert [name for name, _ in run.declined] == ["record_category", "record_category"]
    assert all("not available" in str(error) for _, error in run.declined)


async def test_a_rejected_completion_is_returned_to_the_model_and_the_step_stays_open(
    settings: Settings, boundary: ModelBoundary
) -> None:
    script = [
        _status("collect", "in_progress"),
        _status("collect", "complete"),  # refused by the validator: nothing recorded yet
        _tool("failing_tool", "pear"),  # a failed tool records nothing for the step
        _tool("record_effect", "pear"),
        _status("collect", "complete"),
        _status("categorize", "in_progress"),
        _status("categorize", "complete"),
        _answer("collected"),
    ]
    async with scoped_harness(settings, boundary, "pipeline") as harness:
        run = await _run(harness, boundary, script)
    outcome, calls, task_id = run.outcome, run.calls, run.task_id
    assert outcome.output == TextOutput("collected")
    assert f"Cannot complete 'collect': {REJECTION}" in _texts(calls[2])[-1]
    assert "[>] collect (in_progress)" in _texts(calls[2])[0]
    assert calls[2]["tools"] == COLLECTING
    assert "Task 'collect' -> complete" in _texts(calls[5])[-1]
    assert "[x] collect (complete)" in _texts(calls[5])[0]
    assert _effects(boundary, task_id) == [("failing_tool", "pear"), ("record_effect", "pear")]
    refusal = f"Cannot complete 'collect': {REJECTION}. Address the issues then try again."
    assert run.declined == [(STATUS_TOOL, refusal)]


async def test_an_async_validator_is_awaited_in_the_worker(
    settings: Settings, boundary: ModelBoundary
) -> None:
    script = [
        _status("collect", "in_progress"),
        _tool("record_effect", "one"),
        _status("collect", "complete"),  # refused: one item only
        _tool("record_effect", "two"),
        _status("collect", "complete"),
        _answer("two collected"),
    ]
    async with scoped_harness(settings, boundary, "pipeline-async") as harness:
        run = await _run(harness, boundary, script)
    assert run.outcome.output == TextOutput("two collected")
    refusal = "Cannot complete 'collect': only 1 item(s) recorded; record two"
    assert refusal in _texts(run.calls[3])[-1]
    assert "Task 'collect' -> complete" in _texts(run.calls[5])[-1]


async def test_a_safeguard_halt_is_final_the_pipeline_does_not_nudge_it(
    settings: Settings, boundary: ModelBoundary
) -> None:
    """The same completion asked for three times (refused twice) is a repeated action: the
    run halts LOOP_DETECTED, and no nudge sends the halted agent back to the model."""
    script = [
        _status("collect", "in_progress"),
        _status("collect", "complete"),
        _status("collect", "complete"),
        _status("collect", "complete"),
        _answer("never asked for"),
    ]
    async with scoped_harness(settings, boundary, "pipeline") as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("loop on completion")))
        for command in script:
            boundary.script(task.id.value, command)
        outcome = await asyncio.wait_for(task.await_outcome(), 60)
    assert isinstance(outcome, Completed)
    assert outcome.stop_reason is StopReason.LOOP_DETECTED
    assert len(boundary.calls_for(task.id.value)) == 4


async def test_required_steps_are_nudged_up_to_the_limit_then_the_agent_may_finish(
    settings: Settings, boundary: ModelBoundary
) -> None:
    nudge = (
        "You have not completed the following required tasks: collect, categorize. Please continue."
    )
    async with scoped_harness(settings, boundary, "pipeline") as harness:
        session = await harness.create_session(SessionSpec())
        for round_ in ("first", "second"):
            # Each task of the session runs the pipeline from its first step.
            task = await session.start_task(TaskRequest(TextInput(f"{round_} task")))
            events = task.events()
            for index in range(4):
                boundary.script(task.id.value, _answer(f"{round_} done {index}"))
            outcome = await asyncio.wait_for(task.await_outcome(), 60)
            assert isinstance(outcome, Completed)
            # The caller is told that the agent finished with required steps incomplete.
            (warning,) = [event async for event in events if isinstance(event, Warning)]
            assert "required pipeline steps incomplete (collect, categorize)" in warning.message
            assert outcome.output == TextOutput(f"{round_} done 2")
            calls = boundary.calls_for(task.id.value)
            # Two nudges (the profile's max_nudges), then the agent was let go: a fourth
            # answer was scripted but never asked for.
            assert len(calls) == 3
            assert [_texts(call)[-1] for call in calls] == [f"{round_} task", nudge, nudge]
            assert "[ ] collect (pending)" in _texts(calls[0])[0]


# -- a worker killed mid-pipeline ----------------------------------------------------


@pytest.fixture
def workers(settings: Settings) -> Iterator[list[WorkerProcess]]:
    """Two worker processes of a deployment of their own (short lease, quick sweeps)."""
    suffix = uuid4().hex[:6]
    deployment = settings.model_copy(
        update={
            "namespace": f"{settings.namespace}-pipeline-{suffix}",
            "queue": f"{settings.queue}.pipeline.{suffix}",
            "lease_ttl": timedelta(seconds=2),
            "sweep_interval": timedelta(seconds=0.25),
            "max_deliveries": 3,
        }
    )
    pool = [WorkerProcess(deployment, concurrency=2, name="pipeline") for _ in range(2)]
    with ThreadPoolExecutor(len(pool)) as starting:
        list(starting.map(WorkerProcess.start, pool))
    try:
        yield pool
    finally:
        for worker in pool:
            worker.kill()


@pytest.mark.processes
async def test_a_pipeline_resumes_at_its_step_after_its_worker_process_is_killed(
    workers: list[WorkerProcess], boundary: ModelBoundary
) -> None:
    before_kill = [
        _status("collect", "in_progress"),
        _tool("record_effect", "apple"),
        _status("collect", "complete"),
        _status("categorize", "in_progress"),
    ]
    after_kill = [
        _tool("record_category", "apple"),
        _status("categorize", "complete"),
        _answer("sorted after the kill"),
    ]
    settings = workers[0].settings
    async with CeleryHarness(
        settings, profile="pipeline", run_metadata=boundary.run_metadata
    ) as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("sort, then survive")))
        for command in before_kill:
            boundary.script(task.id.value, command)
        # The fifth model call (categorize in progress) waits for its script: kill its
        # worker process while it is in that call.
        await wait_for(lambda: len(boundary.calls_for(task.id.value)) == 5, within=60)
        killed: dict[str, Any] = boundary.calls_for(task.id.value)[-1]
        group = os.getpgid(int(killed["pid"]))
        victim = next(worker for worker in workers if worker.pid == group)
        await asyncio.to_thread(victim.kill)
        for command in after_kill:
            boundary.script(task.id.value, command)
        outcome = await asyncio.wait_for(task.await_outcome(), 60)

    assert isinstance(outcome, Completed)
    assert outcome.output == TextOutput("sorted after the kill")
    calls = boundary.calls_for(task.id.value)
    assert len(calls) == 5 + len(after_kill)
    resumed = calls[5]
    assert resumed["pid"] != killed["pid"]
    # The resumed run went on at categorize: its board, its instruction, its tools.
    assert "[x] collect (complete)" in _texts(resumed)[0]
    assert "[>] categorize (in_progress)" in _texts(resumed)[0]
    assert "STEP-CATEGORIZE" in _texts(resumed)[0]
    assert resumed["tools"] == CATEGORIZING
    # collect's effect happened once (not repeated by the resumed run), then categorize's.
    assert _effects(boundary, task.id.value) == [
        ("record_effect", "apple"),
        ("record_category", "apple"),
    ]
    assert boundary.overlaps == 0
