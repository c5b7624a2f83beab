"""An admitted parked task whose dispatch is lost still runs, once (docs/tenants.md#failures).

The settle that admits a parked task pushes its id to the dispatch list; a worker pops
it and publishes its run. Here the id is popped by nobody's dispatcher (the test takes
it, as a worker that died right after popping would) while no worker runs at all. A
worker OS process started afterwards finds no message and no id: only the owed publish
in the starting set is left, and its sweeper must publish the run. Observed at the model
boundary in that worker process and in Redis.
"""

from __future__ import annotations

import asyncio
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import Cancelled, Completed, SessionSpec, TaskRequest, TextInput

from harness import CeleryHarness, TenantLimits
from harness.runs import start_run
from tooling.worker_process import WorkerProcess
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings

from .support.boundary import ModelBoundary

pytestmark = pytest.mark.processes


async def test_a_parked_task_whose_dispatch_was_lost_is_published_by_the_sweeper(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    own = settings.model_copy(
        update={"namespace": f"lost-{uuid4().hex[:8]}", "queue": f"lost.{uuid4().hex[:8]}"}
    )
    keys = Keys(own.namespace)
    tenant, limits = f"t-{uuid4().hex[:6]}", TenantLimits(running=1)
    async with CeleryHarness(own, run_metadata=boundary.run_metadata) as harness:
        first = (await start_run(harness, SessionSpec(), TaskRequest(TextInput("1")),
                                 tenant=tenant, limits=limits)).task  # fmt: skip
        parked = (await start_run(harness, SessionSpec(), TaskRequest(TextInput("2")),
                                  tenant=tenant, limits=limits)).task  # fmt: skip
        assert parked.queued
        # No worker serves this deployment: the cancel settles the first task here, and
        # that step admits the parked one and pushes its id for a dispatcher.
        await first.request_cancellation()
        async with asyncio.timeout(10):
            assert isinstance(await first.await_outcome(), Cancelled)
        assert sync_redis.lpop(keys.dispatch_queue()) == parked.id.value  # "lost"
        record = keys.task(parked.id.value)
        assert sync_redis.hget(record, TaskField.PARKED) is None
        assert sync_redis.zscore(keys.starting(), parked.id.value) == 0  # owed its publish
        with WorkerProcess(own, concurrency=2, loglevel="warning", name="lost-dispatch"):
            async with asyncio.timeout(90):
                outcome = await parked.await_outcome()
    assert isinstance(outcome, Completed), outcome
    assert len(boundary.calls_for(parked.id.value)) == 1
    assert boundary.calls_for(first.id.value) == []
    assert sync_redis.hget(record, TaskField.DELIVERIES) == "1"
