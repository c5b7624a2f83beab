"""Bindings of the AHP interaction fixtures to real Redis and real Celery workers.

The ``guarding`` profile's agent calls its approval-gated tool once per task: the tool
guard asks the caller (an interrupt, the task pauses), and the tool, once approved, records
its effect where it runs, in Redis (``ModelBoundary.effect_count``). Responses are
delivered through the real respond script, behind the controllable boundary of
``tests.support.response_control``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from agent_harness_protocol import (
    AgentHarness,
    ApprovalRequirement,
    SessionRequirements,
    SessionSpec,
)

from harness import CeleryHarness
from wire.settings import Settings

from .boundary import ModelBoundary
from .response_control import ResponseBoundary

CALLER_DECIDES = SessionSpec(
    requirements=SessionRequirements(approval=ApprovalRequirement.CALLER_DECIDES)
)


@dataclass(frozen=True, slots=True)
class InteractionBinding:
    """``InteractionRaceFixture`` and ``RepeatedApprovalFixture`` (hence
    ``ResponseAcceptanceFixture``) over the real workers."""

    harness: AgentHarness
    spec: SessionSpec
    observation: ModelBoundary
    response: ResponseBoundary

    def effect_count(self) -> int:
        return self.observation.effect_count()

    def hold_response(self) -> None:
        self.response.hold_response()

    async def await_response_submission(self) -> None:
        await self.response.await_response_submission()

    def release_response(self) -> None:
        self.response.release_response()

    def prepare_next_effect(self) -> None:
        """Every task of the profile calls the gated tool again (its plan)."""


@asynccontextmanager
async def interactions(
    settings: Settings, boundary: ModelBoundary, spec: SessionSpec | None = None
) -> AsyncIterator[InteractionBinding]:
    control = ResponseBoundary()
    harness = CeleryHarness(
        settings,
        profile="guarding",
        run_metadata=boundary.run_metadata,
        responder_factory=control.responder,
    )
    try:
        yield InteractionBinding(harness, spec or CALLER_DECIDES, boundary, control)
    finally:
        control.release_response()
        boundary.release()
        await harness.aclose()
