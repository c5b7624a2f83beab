"""A tenant's limits hold in the start's atomic step (docs/tenants.md).

``running``: at most that many of the tenant's tasks reach a worker at once; the others are
parked with no run message and admitted, oldest first, as its tasks settle. ``queued``
and ``starts_per_second``: a start past them is refused and writes nothing. What ran is
observed at the model boundary, in the worker; what was written, in Redis.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import Cancelled, Completed, SessionSpec, TaskRequest, TextInput

from harness import (
    CeleryHarness,
    CeleryTask,
    TenantLimits,
    TenantQueueFullError,
    TenantRateLimitedError,
)
from harness.runs import start_run
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings
from wire.tenants import TenantRateField

from .support.api import keyspace, settled_keyspace
from .support.boundary import ModelBoundary
from .support.sweeps import watch_past_sweeps
from .support.waiting import until


def _tenant() -> str:
    return f"t-{uuid4().hex[:8]}"


def _finish(boundary: ModelBoundary, *tasks: CeleryTask) -> None:
    """Let the scripted model calls of ``tasks`` answer (each waits for its script)."""
    for task in tasks:
        boundary.script(task.id.value, {"op": "complete", "text": "done"})


async def _start(
    harness: CeleryHarness, tenant: str, limits: TenantLimits, text: str = "work"
) -> CeleryTask:
    run = await start_run(
        harness, SessionSpec(), TaskRequest(TextInput(text)), tenant=tenant, limits=limits
    )
    return run.task


async def test_past_its_running_limit_a_tenant_s_tasks_wait_without_a_message(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    tenant, limits = _tenant(), TenantLimits(running=2)
    keys = Keys(settings.namespace)
    scripted = settings.model_copy(update={"profile": "scripted"})
    async with CeleryHarness(scripted, run_metadata=boundary.run_metadata) as harness:
        tasks = [await _start(harness, tenant, limits, f"task {n}") for n in range(5)]
        await until(lambda: boundary.in_flight() == 2, "two runs at the model")
        parked = [task for task in tasks if task.queued]
        assert [task.id for task in tasks if not task.queued] == [t.id for t in tasks[:2]]
        assert sync_redis.lrange(keys.tenant_parked(tenant), 0, -1) == [
            task.id.value for task in parked
        ]
        # Parked starts have no run message: no sweep publishes them either.
        await watch_past_sweeps(settings, boundary, sync_redis)
        assert boundary.in_flight() == 2
        assert {call["task"] for call in boundary.calls()} >= {t.id.value for t in tasks[:2]}
        assert all(boundary.calls_for(task.id.value) == [] for task in parked)
        info = await harness.task_info(parked[0].id.value, tenant=tenant)
        assert info.parked
        assert info.queued
        _finish(boundary, *tasks)
        async with asyncio.timeout(60):
            outcomes = [await task.await_outcome() for task in tasks]
    assert all(isinstance(outcome, Completed) for outcome in outcomes), outcomes
    # Each ran once: the two admitted first, then the parked ones.
    ids = {task.id.value for task in tasks}
    calls = [call["task"] for call in boundary.calls() if call["task"] in ids]
    assert sorted(calls) == sorted(ids)
    assert set(calls[:2]) == {task.id.value for task in tasks[:2]}
    assert not sync_redis.exists(keys.tenant_parked(tenant), keys.tenant_admitted(tenant))


async def test_a_parked_task_cancelled_never_runs_and_frees_its_place(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    tenant, limits = _tenant(), TenantLimits(running=1)
    keys = Keys(settings.namespace)
    scripted = settings.model_copy(update={"profile": "scripted"})
    async with CeleryHarness(scripted, run_metadata=boundary.run_metadata) as harness:
        running = await _start(harness, tenant, limits)
        parked = await _start(harness, tenant, limits)
        later = await _start(harness, tenant, limits)
        await until(lambda: boundary.in_flight() == 1, "the first run at the model")
        await parked.request_cancellation()
        async with asyncio.timeout(10):
            assert isinstance(await parked.await_outcome(), Cancelled)
        assert sync_redis.lrange(keys.tenant_parked(tenant), 0, -1) == [later.id.value]
        _finish(boundary, running, later)
        async with asyncio.timeout(60):
            assert isinstance(await running.await_outcome(), Completed)
            assert isinstance(await later.await_outcome(), Completed)
    assert boundary.calls_for(parked.id.value) == []
    assert len(boundary.calls_for(later.id.value)) == 1


async def test_past_its_queued_limit_a_start_is_refused_and_writes_nothing(
    idle_queue_settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """On a queue no worker serves, so nothing changes between the two snapshots but
    what the refused start would write."""
    tenant, limits = _tenant(), TenantLimits(running=1, queued=2)
    async with CeleryHarness(idle_queue_settings, run_metadata=boundary.run_metadata) as harness:
        tasks = [await _start(harness, tenant, limits) for _ in range(3)]
        assert [task.queued for task in tasks] == [False, True, True]
        record = Keys(idle_queue_settings.namespace).task(tasks[0].id.value)
        await until(lambda: sync_redis.hget(record, TaskField.PUBLISHED) == "1", "confirmed")
        session = await harness.create_session(SessionSpec(), tenant=tenant)
        before = keyspace(sync_redis, idle_queue_settings)
        with pytest.raises(TenantQueueFullError) as refused:
            await session.start_task(TaskRequest(TextInput("one too many")), limits=limits)
        assert refused.value.parked == 2
        assert refused.value.retry_after is None
        assert keyspace(sync_redis, idle_queue_settings) == before
        # Another tenant is not refused.
        other = await harness.create_session(SessionSpec(), tenant=_tenant())
        started = await other.start_task(TaskRequest(TextInput("other")), limits=limits)
        assert not started.queued
        for task in [*tasks, started]:
            await task.request_cancellation()
        async with asyncio.timeout(30):
            for task in [*tasks, started]:
                assert isinstance(await task.await_outcome(), Cancelled)


async def test_past_its_rate_a_start_is_refused_with_the_wait_and_writes_nothing(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """A bucket of two starts refilled at one start per 100 s: no token comes back while
    the test runs, however slow the machine; the refill is shown by moving the bucket's
    clock back (as the time passing would)."""
    tenant = _tenant()
    limits = TenantLimits(starts_per_second=0.01, burst=2)
    bucket = Keys(settings.namespace).tenant_rate(tenant)
    async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:
        session = await harness.create_session(SessionSpec(), tenant=tenant)
        first = await session.start_task(TaskRequest(TextInput("1")), limits=limits)
        async with asyncio.timeout(30):
            await first.await_outcome()
        second = await session.start_task(TaskRequest(TextInput("2")), limits=limits)
        async with asyncio.timeout(30):
            await second.await_outcome()
        before = await settled_keyspace(sync_redis, settings)
        with pytest.raises(TenantRateLimitedError) as refused:
            await session.start_task(TaskRequest(TextInput("3")), limits=limits)
        wait = refused.value.retry_after
        assert wait is not None
        assert timedelta(seconds=90) < wait <= timedelta(seconds=100)
        assert keyspace(sync_redis, settings) == before
        # 100 s later (the bucket's clock moved back by that much) a start is allowed.
        sync_redis.hincrby(bucket, TenantRateField.AT, -100_000)
        third = await session.start_task(TaskRequest(TextInput("3")), limits=limits)
        async with asyncio.timeout(30):
            assert isinstance(await third.await_outcome(), Completed)
        await session.release()
    assert (
        sync_redis.hget(Keys(settings.namespace).task(third.id.value), TaskField.TENANT) == tenant
    )


async def test_a_retried_start_of_a_parked_task_replays_it_without_a_message(
    idle_queue_settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """A parked start has no message by design: the retry of its request (same
    Idempotency-Key) must answer it as a replay, not adopt it as a start whose publish
    was lost (which would publish it past the tenant's limit)."""
    tenant, limits = _tenant(), TenantLimits(running=1)
    keys = Keys(idle_queue_settings.namespace)
    async with CeleryHarness(idle_queue_settings, run_metadata=boundary.run_metadata) as harness:
        running = await _start(harness, tenant, limits)
        session = await harness.create_session(SessionSpec(), tenant=tenant)
        request = TaskRequest(TextInput("parked"))
        parked = await session.start_task(request, idempotency_key="k-1", limits=limits)
        assert parked.queued
        again = await harness.attach_session(session.id.value, tenant=tenant)
        retried = await again.start_task(request, idempotency_key="k-1", limits=limits)
        assert retried.replayed
        assert retried.id == parked.id
        messages = [
            item
            for name in Keys.broker_queue_lists(idle_queue_settings.queue)
            for item in sync_redis.lrange(name, 0, -1)
        ]
        assert [m for m in messages if parked.id.value in m] == []
        assert sync_redis.hget(keys.task(parked.id.value), TaskField.ADOPTED) is None
        for task in (running, parked):
            await task.request_cancellation()
