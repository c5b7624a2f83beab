"""Proof that the workers' sweeper really ran while a test watched for a republish.

A test that waits to see that some start is *never* run must first show that the thing
that would run it, the sweeper's look at unclaimed starts, actually happened during the
watch. The canary is a start on the deployment's queue whose publish was confirmed but whose
message never reached the broker: a real harness starts it with a publisher that
returns without sending, so its record says ``published`` and it sits in none of the
queue lists, exactly like a message taken by a worker that died before the claim. Only
the sweeper can make it run: when the model boundary sees the canary's call, a sweep
looked at every start older than the canary and republished whatever it was going to
republish.
"""

from __future__ import annotations

import asyncio

import redis
from agent_harness_protocol import SessionSpec, TaskRequest, TextInput

from harness import CeleryHarness
from harness.transport import TaskPublisher
from wire.settings import Settings

from .boundary import ModelBoundary
from .controlled_model import SCOPE
from .waiting import wait_for


class _Unsent(TaskPublisher):
    """Reports every publish as done and sends nothing (revokes go out as usual)."""

    async def publish(
        self, task_id: str, session_id: str | None = None, queue: str | None = None
    ) -> None:
        return None


def watch_seconds(settings: Settings) -> float:
    """Two sweep periods (at their longest, with jitter) plus the lease TTL: a republish
    of anything the last sweep decided to publish has been taken and run by then."""
    sweep = settings.sweep_interval.total_seconds() * 1.5
    return 2 * sweep + settings.lease_ttl.total_seconds()


async def prove_a_sweep(
    settings: Settings, boundary: ModelBoundary, client: redis.Redis, within: float = 90.0
) -> str:
    """Start a canary the sweeper must republish and wait until its model call happened.

    A task run on the deployment's queue first proves that a worker serves (in-process
    workers start their loop, and with it their sweeper, on their first task). Returns
    the canary's task id."""
    # Stamped with the boundary's scope, the canary's calls are seen by a scoped boundary
    # too (without making an unscoped one strict).
    scoped = {SCOPE: boundary.scope}
    async with CeleryHarness(settings, profile="confirmed", run_metadata=scoped) as harness:
        session = await harness.create_session(SessionSpec())
        serving = await session.start_task(TaskRequest(TextInput("sweep-serving")))
        async with asyncio.timeout(within):
            await serving.await_outcome()
    async with CeleryHarness(
        settings, profile="confirmed", run_metadata=scoped, publisher_factory=_Unsent
    ) as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("sweep-canary")))
        canary = task.id.value
        await wait_for(lambda: boundary.calls_for(canary), within=within)
        async with asyncio.timeout(within):
            await task.await_outcome()
    return canary


async def watch_past_sweeps(
    settings: Settings, boundary: ModelBoundary, client: redis.Redis
) -> None:
    """Prove a sweep happened after every start made so far, then wait two more sweep
    periods and a lease TTL for anything it republished to be run."""
    await prove_a_sweep(settings, boundary, client)
    await asyncio.sleep(watch_seconds(settings))
