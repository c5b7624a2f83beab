"""Proof that the workers' sweeper really ran while a test watched for a republish.

A test that waits to see that some start is *never* run must first show that the thing
that would run it, the sweeper's look at unclaimed starts, actually happened during the
watch. The canary is a start whose publish was confirmed but whose message can never be
consumed: it is published, through a real harness and the real broker, to a side queue
no worker listens on, so it sits in none of the deployment's queue lists, exactly like
a message taken by a worker that died before the claim. Only the sweeper can make it
run: when the model boundary sees the canary's call, a sweep looked at every start
older than the canary and republished whatever it was going to republish.
"""

from __future__ import annotations

import asyncio
from uuid import uuid4

import redis
from agent_harness_protocol import SessionSpec, TaskRequest, TextInput

from harness import CeleryHarness
from wire.keys import Keys
from wire.settings import Settings

from .boundary import ModelBoundary
from .controlled_model import SCOPE
from .waiting import wait_for


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
    side = settings.model_copy(update={"queue": f"{settings.queue}.canary.{uuid4().hex[:6]}"})
    async with CeleryHarness(side, profile="confirmed", run_metadata=scoped) as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("sweep-canary")))
        canary = task.id.value
        try:
            await wait_for(lambda: boundary.calls_for(canary), within=within)
            async with asyncio.timeout(within):
                await task.await_outcome()
        finally:
            client.delete(*Keys.broker_queue_lists(side.queue))
    return canary


async def watch_past_sweeps(
    settings: Settings, boundary: ModelBoundary, client: redis.Redis
) -> None:
    """Prove a sweep happened after every start made so far, then wait two more sweep
    periods and a lease TTL for anything it republished to be run."""
    await prove_a_sweep(settings, boundary, client)
    await asyncio.sleep(watch_seconds(settings))
