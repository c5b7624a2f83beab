"""Bindings of the AHP interaction fixtures to real Redis and real Celery workers.

The ``asking`` profile's controlled model asks for an approval inside the worker's graph
(an interrupt) and, once approved, performs its effect there, counting it in Redis
(``ModelBoundary.effect_count``). Responses are delivered through the real respond script,
behind the controllable boundary of ``tests.support.response_control``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from agent_harness_protocol import AgentHarness, SessionSpec

from harness import CeleryHarness
from wire.settings import Settings

from .boundary import ModelBoundary
from .response_control import ResponseBoundary


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
        """Every task of the boundary follows its script from the start: the next one
        asks for the effect again."""


@asynccontextmanager
async def interactions(
    settings: Settings, boundary: ModelBoundary, spec: SessionSpec | None = None
) -> AsyncIterator[InteractionBinding]:
    boundary.script_scope({"op": "ask", "call": "guarded-effect"})
    boundary.script_scope({"op": "complete", "text": "done"})
    control = ResponseBoundary()
    harness = CeleryHarness(
        settings,
        profile="asking",
        run_metadata=boundary.run_metadata,
        responder_factory=control.responder,
    )
    try:
        yield InteractionBinding(harness, spec or SessionSpec(), boundary, control)
    finally:
        control.release_response()
        boundary.release()
        await harness.aclose()
