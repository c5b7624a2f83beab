"""Bindings of the AHP conformance fixtures to real Redis and real Celery workers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from agent_harness_protocol import (
    AgentHarness,
    AgentTask,
    FailureKind,
    ProviderId,
    SessionSpec,
    StopReason,
)
from agent_harness_protocol.conformance import (
    FixtureProfile,
    MessageKind,
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


@asynccontextmanager
async def acceptance(
    settings: Settings, boundary: ModelBoundary, profile: str, spec: SessionSpec
) -> AsyncIterator[AcceptanceBinding]:
    harness = CeleryHarness(settings, profile=profile)
    try:
        yield AcceptanceBinding(harness, spec, boundary)
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
        return CeleryHarness(self._settings, profile=self._profiles[profile_id].profile)
