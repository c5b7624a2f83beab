"""Bindings of the AHP conformance fixtures to real Redis and real Celery workers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from agent_harness_protocol import (
    AgentHarness,
    AgentSession,
    AgentTask,
    AgentUsage,
    FailureKind,
    MessageRole,
    ProviderId,
    SessionSpec,
    StopReason,
)
from agent_harness_protocol.conformance import (
    FixtureProfile,
    MessageKind,
    OutputCase,
    OutputObservation,
    RuntimeObservation,
    TextObservation,
)

from harness import CeleryHarness
from wire.provider import PROVIDER
from wire.settings import Settings

from .boundary import ModelBoundary


@dataclass(frozen=True, slots=True)
class AcceptanceBinding:
    harness: AgentHarness
    spec: SessionSpec
    observation: ModelBoundary


def scoped_harness(settings: Settings, boundary: ModelBoundary, profile: str) -> CeleryHarness:
    """A harness whose sessions' model calls only ``boundary`` sees."""
    return CeleryHarness(settings, profile=profile, run_metadata=boundary.run_metadata)


@asynccontextmanager
async def acceptance(
    settings: Settings, boundary: ModelBoundary, profile: str, spec: SessionSpec
) -> AsyncIterator[AcceptanceBinding]:
    harness = scoped_harness(settings, boundary, profile)
    try:
        yield AcceptanceBinding(harness, spec, boundary)
    finally:
        boundary.release()
        await harness.aclose()


_MEASURED = AgentUsage(input_tokens=7, output_tokens=3, total_tokens=10)


@dataclass(frozen=True, slots=True)
class AccountingBinding:
    """The ``accounting`` profile reports 7 input and 3 output tokens per call."""

    harness: AgentHarness
    spec: SessionSpec
    observation: ModelBoundary
    measurements: tuple[AgentUsage, ...] = (_MEASURED, _MEASURED)
    session_measurements: tuple[AgentUsage | None, ...] = (
        _MEASURED,
        AgentUsage(input_tokens=14, output_tokens=6, total_tokens=20),
    )
    completed_message_roles: frozenset[MessageRole] = frozenset({MessageRole.ANSWER})


@asynccontextmanager
async def accounting(
    settings: Settings, boundary: ModelBoundary
) -> AsyncIterator[AccountingBinding]:
    harness = scoped_harness(settings, boundary, "accounting")
    try:
        yield AccountingBinding(harness, SessionSpec(), boundary)
    finally:
        boundary.release()
        await harness.aclose()


class OutcomeBinding:
    """Drives the ``outcome`` profile, scripted per boundary scope: the partial case
    streams ``retained-partial`` once begun, then completes, fails or waits; the missing
    case completes with a response without any content block, the empty one with ``""``.

    Losing observation: the model stops honouring cancellation and the session is
    released, so cleanup ends before the worker can confirm that the run stopped."""

    known_partial_usage: AgentUsage | None = None

    def __init__(self, harness: AgentHarness, boundary: ModelBoundary, case: OutputCase) -> None:
        self.harness = harness
        self.spec = SessionSpec()
        self._boundary = boundary
        self._case = case

    def begin_model(self) -> None:
        if self._case is OutputCase.PARTIAL:
            self._boundary.script_scope({"op": "delta", "text": "retained-partial"})
        elif self._case is OutputCase.MISSING:
            self._boundary.script_scope({"op": "complete", "text": None})
        else:
            self._boundary.script_scope({"op": "complete", "text": ""})

    def finish_model(self) -> None:
        if self._case is OutputCase.PARTIAL:
            self._boundary.script_scope({"op": "complete", "text": ""})

    def fail_model(self) -> None:
        self._boundary.script_scope({"op": "fail", "message": "the model failed mid-answer"})

    async def lose_observation(self, session: AgentSession) -> None:
        self._boundary.deafen()
        await session.release()


@asynccontextmanager
async def outcome(
    settings: Settings, boundary: ModelBoundary, case: OutputCase
) -> AsyncIterator[OutcomeBinding]:
    harness = scoped_harness(settings, boundary, "outcome")
    try:
        yield OutcomeBinding(harness, boundary, case)
    finally:
        boundary.release()
        await harness.aclose()


@asynccontextmanager
async def observed(boundary: ModelBoundary) -> AsyncIterator[RuntimeObservation]:
    try:
        yield boundary
    finally:
        boundary.release()


class ScriptControl:
    """Drives the scripted controlled model of one task through Redis."""

    def __init__(self, boundary: ModelBoundary, task: AgentTask) -> None:
        self._boundary = boundary
        self._task_id = task.id.value

    async def report_running(self) -> None:
        async with asyncio.timeout(30):
            while not self._boundary.calls_for(self._task_id):  # noqa: ASYNC110 (polls Redis)
                await asyncio.sleep(0.005)

    async def report_message_delta(
        self, message_key: str, text: str, role: MessageKind | None = None
    ) -> None:
        self._boundary.script(self._task_id, {"op": "delta", "text": text})

    async def report_completion(
        self,
        output: OutputObservation | None = None,
        stop_reason: StopReason = StopReason.FINISHED,
    ) -> None:
        text = output.text if isinstance(output, TextObservation) else ""
        finish = "stop" if stop_reason is StopReason.FINISHED else "length"
        self._boundary.script(
            self._task_id, {"op": "complete", "text": text, "finish_reason": finish}
        )

    async def report_failure(self, message: str, kind: FailureKind | None = None) -> None:
        self._boundary.script(self._task_id, {"op": "fail", "message": message})

    async def report_cancelled_termination(self) -> None:
        self._boundary.script(self._task_id, {"op": "fail", "message": "cancelled"})


@dataclass(frozen=True, slots=True)
class LifecycleBinding:
    harness: AgentHarness
    boundary: ModelBoundary

    def control(self, task: AgentTask) -> ScriptControl:
        return ScriptControl(self.boundary, task)


@dataclass(frozen=True, slots=True)
class RequirementProfile:
    declared: FixtureProfile
    profile: str


class RequirementsBinding:
    def __init__(
        self,
        settings: Settings,
        boundary: ModelBoundary,
        profiles: Callable[[], Sequence[RequirementProfile]],
    ) -> None:
        self._settings = settings
        self._boundary = boundary
        self._profiles = {item.declared.id: item for item in profiles()}

    @property
    def provider(self) -> ProviderId:
        return PROVIDER

    @property
    def observation(self) -> RuntimeObservation:
        return self._boundary

    def profiles(self) -> Sequence[FixtureProfile]:
        return tuple(item.declared for item in self._profiles.values())

    def create_harness(self, profile_id: str) -> AgentHarness:
        return scoped_harness(self._settings, self._boundary, self._profiles[profile_id].profile)
