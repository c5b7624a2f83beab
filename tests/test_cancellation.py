"""A recorded cancellation wins over every later step of the run (design invariant 8).

Cancels are aimed at the moment of the claim, while the run sets up and loads its
checkpoint, hundreds of times. Whether the model was invoked is read from the model
boundary (the controlled model records a call the moment its stream is first advanced,
and whether a cancellation reached it), never from the harness's own view.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import pytest
from agent_harness_protocol import (
    AgentTask,
    AgentUsage,
    Cancelled,
    SessionBlockedError,
    SessionSpec,
    TaskRequest,
    TaskStarted,
    TextInput,
    Unresolved,
    UnresolvedReason,
)

from harness import CeleryHarness
from harness.errors import SessionBusyError
from wire.settings import Settings

from .support.boundary import ModelBoundary

ITERATIONS = int(os.environ.get("AHP_CLAIM_RACE_ITERATIONS", "300"))


async def _started(task: AgentTask) -> None:
    async for event in task.events():
        if isinstance(event, TaskStarted):
            return


@pytest.mark.parametrize("profile", ["slow", "slow-unconfirmed"])
async def test_a_cancel_aimed_at_the_claim_is_never_lost_nor_judged_without_the_model(
    settings: Settings, boundary: ModelBoundary, profile: str
) -> None:
    """Each task is cancelled 0-3.5 ms after its claim was recorded (the started entry the
    claim script appends), while the worker sets the run up and loads the checkpoint. The
    model streams for about a second, so a cancel that is not lost always ends it.

    Never ``Completed``; a task whose model the boundary never saw invoked ends
    ``Cancelled`` with measured-zero usage (under ``unconfirmed`` semantics too); an
    ``Unresolved`` is only the unconfirmed cancellation of a model call the boundary saw
    invoked and cancelled."""
    unconfirmed = profile == "slow-unconfirmed"
    faults: Counter[str] = Counter()
    examples: dict[str, str] = {}
    seen: Counter[str] = Counter()
    async with CeleryHarness(settings, profile=profile, run_metadata=boundary.run_metadata) as h:
        session = await h.create_session(SessionSpec())
        for index in range(ITERATIONS):
            for _ in range(200):
                try:
                    task = await session.start_task(TaskRequest(TextInput(f"claim-race-{index}")))
                    break
                except (SessionBlockedError, SessionBusyError):
                    await asyncio.sleep(0.01)
            else:
                pytest.fail("the session stayed busy")
            await asyncio.wait_for(_started(task), 30)
            await asyncio.sleep((index % 8) * 0.0005)
            await task.request_cancellation()
            outcome = await asyncio.wait_for(task.await_outcome(), 30)
            invoked = bool(boundary.calls_for(task.id.value))
            seen[f"{type(outcome).__name__}{'+model' if invoked else ''}"] += 1
            fault = ""
            if not isinstance(outcome, Cancelled | Unresolved):
                fault = f"{type(outcome).__name__} after a cancel requested before the model ended"
            elif not invoked and not isinstance(outcome, Cancelled):
                fault = "Unresolved although the model was never invoked"
            elif not invoked and outcome.usage != AgentUsage.ZERO:
                fault = "model never invoked but usage not measured zero"
            elif invoked and outcome.usage != AgentUsage.UNKNOWN:
                fault = "model invoked but usage not unknown"
            elif isinstance(outcome, Unresolved) and not (
                unconfirmed
                and outcome.reason is UnresolvedReason.CANCELLATION_UNCONFIRMED
                and boundary.was_cancelled(task.id.value)
            ):
                fault = (
                    f"Unresolved ({outcome.reason.value}: {outcome.known}; model cancelled: "
                    f"{boundary.was_cancelled(task.id.value)})"
                )
            if fault:
                faults[fault] += 1
                examples.setdefault(fault, task.id.value)
    assert not faults, f"{dict(faults)} in {ITERATIONS} tries (examples {examples}); {dict(seen)}"
