"""Honest outcomes: usage accounting, remote failure causes, outlived runs."""

from __future__ import annotations

import asyncio

import pytest
from agent_harness_protocol import (
    AgentUsage,
    Cancelled,
    Completed,
    Failed,
    FailureKind,
    SessionBlockedError,
    SessionSpec,
    TaskRequest,
    TextInput,
    Unresolved,
    UnresolvedReason,
    UsageChanged,
)

from harness import CeleryHarness, RemoteTaskError
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.fixtures import ScriptControl
from .support.waiting import wait_for


def _request(text: str) -> TaskRequest:
    return TaskRequest(TextInput(text))


async def test_usage_is_measured_per_task_and_committed_once_per_outcome(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with CeleryHarness(settings, profile="metered") as harness:
        session = await harness.create_session(SessionSpec())
        first = await session.start_task(_request("metered one"))
        events = first.events()
        outcome = await first.await_outcome()
        assert outcome.usage == AgentUsage(input_tokens=7, output_tokens=3, total_tokens=10)
        assert outcome.session_usage == AgentUsage(
            input_tokens=7, output_tokens=3, total_tokens=10, cached_input_tokens=None
        )
        usage_events = [event async for event in events if isinstance(event, UsageChanged)]
        assert [event.task for event in usage_events] == [outcome.usage]
        second = await (await session.start_task(_request("metered two"))).await_outcome()
        assert second.session_usage is not None
        assert second.session_usage.input_tokens == 14
        assert second.session_usage.total_tokens == 20
        # Fields the model never reported stay unknown, never a fabricated zero.
        assert second.session_usage.cached_input_tokens is None
        assert second.session_usage.reasoning_tokens is None


async def test_a_model_without_usage_metadata_reports_unknown_usage(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        outcome = await (await session.start_task(_request("no usage"))).await_outcome()
        assert isinstance(outcome, Completed)
        assert outcome.usage == AgentUsage.UNKNOWN
        # Nothing of the session's usage was ever measured: no snapshot, as AHP's
        # accounting suite requires of a task cancelled before any measurement.
        assert outcome.session_usage is None


async def test_a_worker_side_exception_becomes_failed_with_its_type_and_message(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with CeleryHarness(settings, profile="lifecycle") as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(_request("will fail"))
        control = ScriptControl(boundary, task)
        await control.report_running()
        await control.report_failure("provider exploded")
        outcome = await task.await_outcome()
        assert isinstance(outcome, Failed)
        assert outcome.kind is FailureKind.UNKNOWN
        assert outcome.message == "provider exploded"
        assert isinstance(outcome.cause, RemoteTaskError)
        assert outcome.cause.type_name == "RuntimeError"
        assert outcome.cause.remote_message == "provider exploded"


async def test_a_run_that_outlives_its_cancelled_task_blocks_the_session_until_it_ends(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with CeleryHarness(settings, profile="ignoring") as harness:
        session = await harness.create_session(SessionSpec())
        boundary.hold()
        task = await session.start_task(_request("outliving run"))
        await wait_for(lambda: boundary.calls_for(task.id.value))
        await task.request_cancellation()
        outcome = await task.await_outcome()
        assert isinstance(outcome, Unresolved)
        assert outcome.reason is UnresolvedReason.CANCELLATION_UNCONFIRMED
        assert boundary.in_flight() == 1  # the model really is still running
        with pytest.raises(SessionBlockedError):
            await session.start_task(_request("must wait"))
        boundary.release()
        await wait_for(lambda: boundary.in_flight() == 0)

        async def admitted() -> bool:
            try:
                next_task = await session.start_task(_request("after the run ended"))
            except SessionBlockedError:
                return False
            return isinstance(await next_task.await_outcome(), Completed)

        for _ in range(100):
            if await admitted():
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the session stayed blocked after its run ended")
        assert all("must wait" not in text for text in boundary.observed_text_values)


async def test_a_cancelled_turns_input_stays_in_the_next_tasks_context(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        boundary.hold()
        task = await session.start_task(_request("cancelled-input"))
        await wait_for(lambda: boundary.calls_for(task.id.value))
        await task.request_cancellation()
        assert isinstance(await task.await_outcome(), Cancelled)
        boundary.release()
        following = await session.start_task(_request("next-input"))
        assert isinstance(await following.await_outcome(), Completed)
        (call,) = boundary.calls_for(following.id.value)
        assert call["texts"] == ["cancelled-input", "next-input"]
