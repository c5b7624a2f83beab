"""One tenant's burst does not starve another (docs/tenants.md#fairness).

Tenant A starts 2,000 tasks, then tenant B starts one. A's running limit is twice the
pool's run slots, so A alone keeps the pool full and a backlog of A's messages waits at
the broker. Because past its limit A's tasks wait in A's own line with no run message,
the broker holds at most A's running limit of A's messages when B's arrives, and each A
task admitted later is published behind B's (at start priority, never ahead of it). The
stated bound: between B's start and B's model call, at most ``running + slots`` of A's
model calls begin (A's runs already claimed and A's messages ahead of B: ``running`` in
all; and the other slots taking A's next ones while B's run reaches its model), whatever
A queued. Without the limit B's call comes after nearly all of A's 2,000.

Observed at the model boundary, in the worker (the order of the calls it received), and
in Redis; A's tasks are counted: every one completes, each with exactly one model call.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput

from harness import CeleryHarness, CeleryTask, TenantLimits
from harness.runs import start_run
from wire.keys import Keys
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.waiting import until

BURST = 2_000
SLOTS = 12
"""The in-process worker's run slots (tests/conftest.py)."""
LIMITS = TenantLimits(running=2 * SLOTS)


async def _start(harness: CeleryHarness, tenant: str, text: str) -> CeleryTask:
    started = await start_run(
        harness, SessionSpec(), TaskRequest(TextInput(text)), tenant=tenant, limits=LIMITS
    )
    return started.task


@pytest.mark.timeout(600)
async def test_a_tenant_s_burst_of_2000_does_not_starve_another_tenant_s_start(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    tenant_a, tenant_b = f"a-{uuid4().hex[:6]}", f"b-{uuid4().hex[:6]}"
    keys = Keys(settings.namespace)
    brisk = settings.model_copy(update={"profile": "brisk"})  # each model call: 0.1 s
    async with CeleryHarness(brisk, run_metadata=boundary.run_metadata) as harness:
        burst: list[CeleryTask] = []
        for first in range(0, BURST, 100):
            burst += await asyncio.gather(
                *(_start(harness, tenant_a, f"a {n}") for n in range(first, first + 100))
            )
        assert sync_redis.llen(keys.tenant_parked(tenant_a)) > BURST // 2  # A's line is long
        calls_before_b = len(boundary.calls())
        b_task = await _start(harness, tenant_b, "b")
        async with asyncio.timeout(300):
            b_outcome = await b_task.await_outcome()
            a_outcomes = [await task.await_outcome() for task in burst]
    assert isinstance(b_outcome, Completed), b_outcome
    calls = [str(call["task"]) for call in boundary.calls()]
    b_call = calls.index(b_task.id.value)
    a_ids = {task.id.value for task in burst}
    a_calls_ahead = sum(task in a_ids for task in calls[calls_before_b:b_call])
    assert a_calls_ahead <= 2 * SLOTS + SLOTS, (  # running + slots
        f"{a_calls_ahead} of A's model calls began between B's start and B's call "
        f"(A had {BURST - calls_before_b} to go)"
    )
    # None of A's tasks was lost or ran twice.
    assert all(isinstance(outcome, Completed) for outcome in a_outcomes)
    per_task = Counter(task for task in calls if task in a_ids)
    assert len(per_task) == BURST
    assert set(per_task.values()) == {1}
    assert not sync_redis.exists(keys.tenant_parked(tenant_a), keys.tenant_admitted(tenant_a))
    # The 2,000 single-task sessions' checkpoint threads are deleted by the workers'
    # maintenance consumer: done before the next test snapshots the keyspace.
    await until(
        lambda: (
            sync_redis.llen(keys.maintenance_queue()) == 0
            and not any(
                sync_redis.llen(keys.maintenance_processing(str(consumer)))
                for consumer in sync_redis.smembers(keys.maintenance_consumers())  # type: ignore[union-attr]
            )
        ),
        "the burst's maintenance done",
        within=300,
    )
