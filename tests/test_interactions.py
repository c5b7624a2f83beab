"""Approvals as LangGraph interrupts on real workers: a paused task holds no worker and no
lease, the caller's answer resumes it on any worker, and the effect happens once, only if
approved. The effect is counted where it happens (the worker), in Redis; the pause is
read from the task's record and the deployment's running set."""

from __future__ import annotations

import asyncio

import pytest
import redis
from agent_harness_protocol import (
    AnswerResponse,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequirement,
    ApprovalResponse,
    Cancelled,
    Capability,
    CompatibilityStatus,
    Completed,
    ConditionalSupport,
    QuestionRequest,
    QuestionRequirement,
    SessionRequirements,
    SessionSpec,
    TaskRequest,
    TaskState,
    TextInput,
    Unsupported,
)
from agent_harness_protocol.conformance import (
    ApprovalScopeConformanceTests,
    FixtureResource,
    InteractionConformanceTests,
    InteractionRaceFixture,
    RepeatedApprovalFixture,
    ResponseAcceptanceConformanceTests,
    ResponseAcceptanceFixture,
)

from harness import CeleryHarness
from harness.admission import support_report, validate_session
from wire.keys import Keys
from wire.profiles import load_profiles
from wire.records import TaskField
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.fixtures import scoped_harness
from .support.interaction_fixtures import interactions
from .support.start_control import StartBoundary
from .support.waiting import wait_for


async def test_a_paused_task_holds_no_worker_and_resumes_with_the_approved_effect_once(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    harness = scoped_harness(settings, boundary, "guarding")
    keys = Keys(settings.namespace)
    try:
        task = await (await harness.create_session(SessionSpec())).start_task(
            TaskRequest(TextInput("guarded-effect"))
        )
        await wait_for(lambda: bool(task.pending_interactions))
        (request,) = task.pending_interactions
        assert isinstance(request, ApprovalRequest)
        assert ApprovalDecision.APPROVE_FOR_SESSION not in request.available_decisions
        assert task.state is TaskState.AWAITING_RESPONSE
        record = sync_redis.hgetall(keys.task(task.id.value))
        assert record[TaskField.STATE] == "awaiting_response"
        assert record[TaskField.AWAITING] == request.interaction_id.value
        session_id = record[TaskField.SESSION]
        assert not sync_redis.exists(keys.lease(session_id))
        assert sync_redis.zscore(keys.running(), task.id.value) is None
        assert boundary.in_flight() == 0  # no model call waits: the run has ended
        assert boundary.effect_count() == 0

        await task.respond(request.interaction_id, ApprovalResponse(ApprovalDecision.APPROVE_ONCE))
        assert not task.pending_interactions
        outcome = await task.await_outcome()
        assert isinstance(outcome, Completed)
        assert outcome.output is not None
        assert outcome.output.text == "guarded-result"
        assert boundary.effect_count() == 1
        assert len(boundary.calls_for(task.id.value)) == 2  # the tool call, then the answer
    finally:
        await harness.aclose()


async def test_a_declined_approval_performs_no_effect(
    settings: Settings, boundary: ModelBoundary
) -> None:
    harness = scoped_harness(settings, boundary, "guarding")
    try:
        task = await (await harness.create_session(SessionSpec())).start_task(
            TaskRequest(TextInput("guarded-effect"))
        )
        await wait_for(lambda: bool(task.pending_interactions))
        (request,) = task.pending_interactions
        await task.respond(request.interaction_id, ApprovalResponse(ApprovalDecision.DECLINE))
        outcome = await task.await_outcome()
        assert isinstance(outcome, Completed)
        assert outcome.output is not None
        assert boundary.effect_count() == 0
        # The model was told, in place of the tool's result.
        resumed = boundary.calls_for(task.id.value)[-1]
        assert "declined by the caller" in resumed["texts"]
    finally:
        await harness.aclose()


async def test_a_cancel_decision_cancels_the_paused_task_at_once_without_the_effect(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    harness = scoped_harness(settings, boundary, "guarding")
    try:
        task = await (await harness.create_session(SessionSpec())).start_task(
            TaskRequest(TextInput("guarded-effect"))
        )
        await wait_for(lambda: bool(task.pending_interactions))
        (request,) = task.pending_interactions
        await task.respond(request.interaction_id, ApprovalResponse(ApprovalDecision.CANCEL))
        assert isinstance(await task.await_outcome(), Cancelled)
        record = sync_redis.hgetall(Keys(settings.namespace).task(task.id.value))
        assert record[TaskField.STATE] == "cancelled"
        assert record[TaskField.CANCEL] == "1"
        assert boundary.effect_count() == 0
        assert len(boundary.calls_for(task.id.value)) == 1  # never resumed
    finally:
        await harness.aclose()


# -- the AHP suites ----------------------------------------------------------------------


class _Bound:
    settings: Settings
    model: ModelBoundary

    @pytest.fixture(autouse=True)
    def _bind(self, settings: Settings, boundary: ModelBoundary) -> None:
        self.settings = settings
        self.model = boundary


class TestInteraction(_Bound, InteractionConformanceTests):
    def interaction_fixture(self) -> FixtureResource[InteractionRaceFixture]:
        return interactions(self.settings, self.model)


class TestApprovalScope(_Bound, ApprovalScopeConformanceTests):
    def approval_fixture(self) -> FixtureResource[RepeatedApprovalFixture]:
        return interactions(self.settings, self.model)


class TestResponseAcceptance(_Bound, ResponseAcceptanceConformanceTests):
    def response_fixture(self) -> FixtureResource[ResponseAcceptanceFixture]:
        return interactions(self.settings, self.model)


async def test_approve_for_session_is_offered_only_with_a_described_grant_and_enforced_by_workers(
    settings: Settings, boundary: ModelBoundary
) -> None:
    harness = scoped_harness(settings, boundary, "guarding-granted")
    try:
        session = await harness.create_session(SessionSpec())
        first = await session.start_task(TaskRequest(TextInput("first")))
        await wait_for(lambda: bool(first.pending_interactions))
        (request,) = first.pending_interactions
        assert isinstance(request, ApprovalRequest)
        assert ApprovalDecision.APPROVE_FOR_SESSION in request.available_decisions
        assert request.session_grant is not None
        assert "for the rest of this session" in request.session_grant.description
        await first.respond(
            request.interaction_id, ApprovalResponse(ApprovalDecision.APPROVE_FOR_SESSION)
        )
        assert isinstance(await first.await_outcome(), Completed)
        assert boundary.effect_count() == 1

        # Granted in this session: the next task's call runs without asking.
        second = await session.start_task(TaskRequest(TextInput("second")))
        assert isinstance(await second.await_outcome(), Completed)
        assert boundary.effect_count() == 2
        assert len(boundary.effects_for(second.id.value)) == 1

        # Another session has no grant: it asks again.
        other = await (await harness.create_session(SessionSpec())).start_task(
            TaskRequest(TextInput("elsewhere"))
        )
        await wait_for(lambda: bool(other.pending_interactions))
        assert boundary.effect_count() == 2
        await other.request_cancellation()
        assert isinstance(await other.await_outcome(), Cancelled)
        assert boundary.effect_count() == 2
    finally:
        await harness.aclose()


def test_caller_approval_is_admitted_only_for_profiles_with_approval_gated_tools() -> None:
    registry = load_profiles("tests.support.profiles:PROFILES")
    caller = SessionSpec(
        requirements=SessionRequirements(approval=ApprovalRequirement.CALLER_DECIDES)
    )
    reviewed = SessionSpec(
        requirements=SessionRequirements(approval=ApprovalRequirement.AGENT_REVIEWED)
    )
    guarding, plain = registry["guarding"], registry["confirmed"]
    assert isinstance(support_report(guarding)[Capability.CALLER_APPROVAL], ConditionalSupport)
    assert validate_session(guarding, caller).status is CompatibilityStatus.COMPATIBLE
    assert validate_session(guarding, reviewed).status is CompatibilityStatus.INCOMPATIBLE
    assert isinstance(support_report(plain)[Capability.CALLER_APPROVAL], Unsupported)
    assert validate_session(plain, caller).status is CompatibilityStatus.INCOMPATIBLE


async def test_a_question_pauses_the_task_and_its_answer_reaches_the_model(
    settings: Settings, boundary: ModelBoundary
) -> None:
    harness = scoped_harness(settings, boundary, "questioning")
    spec = SessionSpec(
        requirements=SessionRequirements(questions=QuestionRequirement.CALLER_ANSWERS)
    )
    try:
        task = await (await harness.create_session(spec)).start_task(
            TaskRequest(TextInput("pick a colour"))
        )
        await wait_for(lambda: bool(task.pending_interactions))
        (request,) = task.pending_interactions
        assert isinstance(request, QuestionRequest)
        assert request.prompt == "Which colour?"
        assert request.choices == ("red", "blue")
        assert task.state is TaskState.AWAITING_RESPONSE
        with pytest.raises(ValueError, match="one of"):
            await task.respond(request.interaction_id, AnswerResponse("green"))
        with pytest.raises(ValueError, match="AnswerResponse"):
            await task.respond(
                request.interaction_id, ApprovalResponse(ApprovalDecision.APPROVE_ONCE)
            )
        await task.respond(request.interaction_id, AnswerResponse("blue"))
        outcome = await task.await_outcome()
        assert isinstance(outcome, Completed)
        calls = boundary.calls_for(task.id.value)
        assert len(calls) == 2
        assert "blue" in calls[1]["texts"]  # the tool's result the model read
    finally:
        await harness.aclose()


async def test_the_next_task_of_a_session_whose_paused_task_was_cancelled_runs_afresh(
    settings: Settings, boundary: ModelBoundary
) -> None:
    harness = scoped_harness(settings, boundary, "guarding")
    try:
        session = await harness.create_session(SessionSpec())
        first = await session.start_task(TaskRequest(TextInput("first")))
        await wait_for(lambda: bool(first.pending_interactions))
        await first.request_cancellation()
        assert isinstance(await first.await_outcome(), Cancelled)
        second = await session.start_task(TaskRequest(TextInput("second")))
        await wait_for(lambda: bool(second.pending_interactions))
        (request,) = second.pending_interactions
        assert request.interaction_id != first.id.value
        await second.respond(
            request.interaction_id, ApprovalResponse(ApprovalDecision.APPROVE_ONCE)
        )
        assert isinstance(await second.await_outcome(), Completed)
        assert [effect["task"] for effect in boundary.effects()] == [second.id.value]
        assert any("second" in text for text in boundary.calls_for(second.id.value)[0]["texts"])
    finally:
        await harness.aclose()


async def test_a_resume_whose_publish_was_refused_is_published_again_by_the_sweeper(
    settings: Settings, boundary: ModelBoundary
) -> None:
    """The response is recorded (the task is due) but its resume message never reaches
    the broker: the workers' sweeper publishes it, and the task resumes once."""
    starts = StartBoundary()
    harness = CeleryHarness(
        settings,
        profile="guarding",
        run_metadata=boundary.run_metadata,
        publisher_factory=starts.publisher,
    )
    try:
        task = await (await harness.create_session(SessionSpec())).start_task(
            TaskRequest(TextInput("guarded-effect"))
        )
        await wait_for(lambda: bool(task.pending_interactions))
        (request,) = task.pending_interactions
        starts.reject_before_delivery("the resume is lost")
        await task.respond(request.interaction_id, ApprovalResponse(ApprovalDecision.APPROVE_ONCE))
        assert starts.observed_submissions() == 2
        assert starts.observed_accepted_starts() == 1  # the start only
        assert isinstance(await asyncio.wait_for(task.await_outcome(), 60), Completed)
        assert boundary.effect_count() == 1
    finally:
        await harness.aclose()


async def test_two_approvals_of_one_step_resume_the_task_only_once_both_are_answered(
    settings: Settings, boundary: ModelBoundary
) -> None:
    harness = scoped_harness(settings, boundary, "guarding-twice")
    try:
        task = await (await harness.create_session(SessionSpec())).start_task(
            TaskRequest(TextInput("two effects"))
        )
        await wait_for(lambda: len(task.pending_interactions) == 2)
        first, second = task.pending_interactions
        await task.respond(first.interaction_id, ApprovalResponse(ApprovalDecision.APPROVE_ONCE))
        assert [r.interaction_id for r in task.pending_interactions] == [second.interaction_id]
        assert task.state is TaskState.AWAITING_RESPONSE
        assert len(boundary.calls_for(task.id.value)) == 1  # not resumed yet
        await task.respond(second.interaction_id, ApprovalResponse(ApprovalDecision.DECLINE))
        outcome = await task.await_outcome()
        assert isinstance(outcome, Completed)
        effects = boundary.effects_for(task.id.value)
        assert len(effects) == 1
        # The approved request names its call's arguments; only that call ran.
        assert isinstance(first, ApprovalRequest)
        assert first.detail is not None
        label = "first" if '"label":"first"' in first.detail else "second"
        assert effects[0]["args"]["label"] == label
    finally:
        await harness.aclose()
