"""Faults a worker pool meets, each on a pool of its own, with workers as separate OS
processes: a deployment whose lost workers' tasks end ``Unresolved``, a prefork pool (a
poison task that kills its worker at every delivery, SIGTERM with running and queued
tasks), no worker yet (a message taken off the queue and lost before any claim).

Each test then checks the three promises: no admitted task is lost, each task has exactly
one terminal outcome, and two graph runs never ran on one session at once. The faults on
the session's fault pool are in ``tests/test_faults.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import redis
from agent_harness_protocol import (
    Completed,
    Failed,
    SessionSpec,
    TaskRequest,
    TextInput,
    Unresolved,
    UnresolvedReason,
)

from wire.keys import Keys
from wire.settings import Settings, WorkerLossPolicy
from wire.store import ClaimResult

from .support.boundary import ModelBoundary
from .support.claims import ClaimCounts
from .support.controlled_model import KILL_MARKER
from .support.fault_harness import harness_of
from .support.fault_pool import Pool, fault_settings
from .support.keyspace import task_record, terminal_entries
from .support.waiting import until

pytestmark = pytest.mark.processes


async def test_lost_worker_ends_the_task_unresolved_when_the_deployment_says_so(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    workers = Pool(fault_settings(settings, on_worker_loss=WorkerLossPolicy.UNRESOLVED))
    workers.start()
    try:
        async with harness_of(workers) as harness:
            session = await harness.create_session(SessionSpec())
            boundary.hold()
            task = await session.start_task(TaskRequest(TextInput("lost-and-unresolved")))
            await until(lambda: bool(boundary.calls_for(task.id.value)))
            call = boundary.calls_for(task.id.value)[0]
            claims = ClaimCounts(sync_redis, workers.settings.namespace)
            seconds, micros = sync_redis.time()  # type: ignore[misc]
            killed_ms = int(seconds) * 1000 + int(micros) // 1000
            await asyncio.to_thread(workers.replace, workers.owner_of(int(str(call["pid"]))))
            # Waiting only (how soon is bench material): a sweeper settles it once its
            # lease lapsed; the broker would redeliver the message after hours.
            outcome = await asyncio.wait_for(task.await_outcome(), 30)
            assert isinstance(outcome, Unresolved)
            assert outcome.reason is UnresolvedReason.OBSERVATION_LOST
            assert outcome.usage.total_tokens is None
            # Settled after the kill by a sweeper of the pool, which found its lease lapsed:
            # not published again, and no claim of a redelivered message settled it.
            record = task_record(sync_redis, workers.settings.namespace, task.id.value)
            assert int(record["settled_ms"]) >= killed_ms, (record, killed_ms)
            assert record.get("recoveries", "0") == "0", record
            assert record["deliveries"] == "1", record
            assert claims.since()[ClaimResult.CLAIMED] == 0, claims.since()
            assert claims.since()[ClaimResult.LOST] == 0, claims.since()
            swept = f"task {task.id.value} lost its worker; settled unresolved"
            assert any(swept in worker.log_path.read_text() for worker in workers.workers)
            assert len(boundary.calls_for(task.id.value)) == 1  # never run again
            boundary.release()
            after = await session.start_task(TaskRequest(TextInput("session-usable-again")))
            assert isinstance(await asyncio.wait_for(after.await_outcome(), 30), Completed)
            assert terminal_entries(sync_redis, workers.settings.namespace, task.id.value) == 1
    finally:
        boundary.release()
        workers.stop()


async def test_poison_task_fails_after_a_bounded_number_of_deliveries(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """A task whose model kills its worker process every time ends Failed after
    ``max_deliveries`` claims instead of killing workers forever. (Prefork: Celery
    replaces each killed child; a threads-pool worker killed this way is a whole node
    process, restarted by ``ahp-celery worker``'s supervisor or the orchestrator.)"""
    pool = Pool(fault_settings(settings), layout="prefork")
    pool.start()
    try:
        await _poison_fails_after_bounded_deliveries(pool, boundary, sync_redis)
    finally:
        pool.stop()


async def _poison_fails_after_bounded_deliveries(
    pool: Pool, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with harness_of(pool) as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput(f"poison {KILL_MARKER}")))
        outcome = await asyncio.wait_for(task.await_outcome(), 60)
        assert isinstance(outcome, Failed)
        assert "max_deliveries" in outcome.message
        assert len(boundary.calls_for(task.id.value)) == pool.settings.max_deliveries
        record = task_record(sync_redis, pool.settings.namespace, task.id.value)
        assert record["deliveries"] == str(pool.settings.max_deliveries)
        assert terminal_entries(sync_redis, pool.settings.namespace, task.id.value) == 1
        # The pool (its pool children were replaced by Celery) still serves the session.
        healthy = await session.start_task(TaskRequest(TextInput("after-poison")))
        assert isinstance(await asyncio.wait_for(healthy.await_outcome(), 60), Completed)
        assert boundary.overlaps == 0


async def test_sigterm_finishes_running_tasks_and_hands_back_queued_ones(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """A deploy sends SIGTERM to a prefork worker's main process (not its children) with
    two running and two queued tasks: the running ones finish on it, the queued ones run
    on its replacement; none is lost. (A threads-pool worker hands its running runs back
    instead: ``tests/test_scale.py``.)"""
    workers = Pool(fault_settings(settings), size=1, layout="prefork")
    workers.start()
    try:
        async with harness_of(workers) as harness:
            sessions = [await harness.create_session(SessionSpec()) for _ in range(4)]
            boundary.hold()
            tasks = [
                await session.start_task(TaskRequest(TextInput(f"deploy-{index}")))
                for index, session in enumerate(sessions)
            ]
            running = tasks[:2]
            await until(lambda: all(boundary.calls_for(task.id.value) for task in running))
            old = workers.workers[0]
            assert old.pid is not None
            os.kill(old.pid, signal.SIGTERM)
            # Proof the signal was taken (Celery's own line), then time it would need to exit.
            await until(lambda: "Warm shutdown" in old.log_tail(), what="the warm shutdown")
            await asyncio.sleep(1.0)
            assert old.running, old.log_tail()
            boundary.release()
            first_two = await asyncio.wait_for(
                asyncio.gather(*(task.await_outcome() for task in running)), 30
            )
            assert all(isinstance(outcome, Completed) for outcome in first_two)
            # Its running tasks done, it exits by itself, with a warm shutdown's code (a
            # SIGTERM from stop() could land during the interpreter's exit and kill it).
            await until(lambda: not old.running, "the warm shutdown's exit", within=60)
            assert old.returncode == 0, old.log_tail()
            await asyncio.to_thread(workers.replace, old, kill=False)
            rest = await asyncio.wait_for(
                asyncio.gather(*(task.await_outcome() for task in tasks[2:])), 30
            )
            assert all(isinstance(outcome, Completed) for outcome in rest)
            for task in tasks:
                assert len(boundary.calls_for(task.id.value)) == 1
                assert terminal_entries(sync_redis, workers.settings.namespace, task.id.value) == 1
            assert boundary.overlaps == 0
    finally:
        boundary.release()
        workers.stop()


async def test_a_message_taken_by_a_worker_that_died_before_claiming_is_published_again(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """A worker killed between taking a message from the broker and claiming its task
    leaves the task STARTING with its message gone (kombu would only restore it after the
    visibility timeout). Here the message is taken off the queue for real and dropped
    before any worker exists; the workers' sweeper publishes the task again."""
    workers = Pool(fault_settings(settings))
    try:
        async with harness_of(workers) as harness:
            session = await harness.create_session(SessionSpec())
            task = await session.start_task(TaskRequest(TextInput("taken-then-lost")))
            lists = Keys.broker_queue_lists(workers.settings.queue)
            taken = sync_redis.brpop(list(lists), timeout=5)
            assert taken is not None
            assert task.id.value in str(taken[1])
            await asyncio.to_thread(workers.start)
            outcome = await asyncio.wait_for(task.await_outcome(), 30)
            assert isinstance(outcome, Completed)
            assert len(boundary.calls_for(task.id.value)) == 1
            assert terminal_entries(sync_redis, workers.settings.namespace, task.id.value) == 1
    finally:
        workers.stop()
