"""A task runs only on the broker queue it was started on.

The deployment's in-process worker serves ``settings.queue``; a caller starts tasks on
another queue of the same deployment (namespace). The worker's sweeper looks at those
starts (their messages are in none of its queue lists) and must leave them alone: before
the task record kept its queue, it "recovered" them onto its own queue and ran them.
"""

from __future__ import annotations

import asyncio
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput

from harness import CeleryHarness
from tooling.worker_process import WorkerProcess
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.lost_workers import lost_mid_run
from .support.sweeps import watch_past_sweeps

pytestmark = pytest.mark.processes


async def test_a_worker_never_runs_a_task_of_a_queue_it_does_not_serve(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    other = settings.model_copy(update={"queue": f"{settings.queue}.other.{uuid4().hex[:6]}"})
    keys = Keys(settings.namespace)
    async with CeleryHarness(other, run_metadata=boundary.run_metadata) as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("only on the other queue")))
        task_id = task.id.value
        assert sync_redis.hget(keys.task(task_id), TaskField.QUEUE) == other.queue
        # A sweep of the deployment's worker looked at this start, and whatever it
        # republished had time to run.
        await watch_past_sweeps(settings, boundary, sync_redis)
        assert boundary.calls_for(task_id) == []
        assert sync_redis.hget(keys.task(task_id), TaskField.STATE) == "starting"
        assert sync_redis.hget(keys.task(task_id), TaskField.RECOVERIES) in {None, "0"}
        # A worker of its own queue runs it, once.
        with WorkerProcess(other, concurrency=2, loglevel="warning", name="other-queue"):
            async with asyncio.timeout(60):
                outcome = await task.await_outcome()
        assert isinstance(outcome, Completed), outcome
        assert len(boundary.calls_for(task_id)) == 1


async def test_a_run_lost_on_its_queue_is_published_again_on_that_queue(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """The deployment's sweeper recovers a lease that lapsed with its worker, whichever
    queue the task is on; its new message goes to that queue, where a worker of that
    queue resumes it (no worker of the sweeper's queue ever runs it)."""
    other = settings.model_copy(update={"queue": f"{settings.queue}.lost.{uuid4().hex[:6]}"})
    keys = Keys(settings.namespace)
    boundary.hold()
    async with CeleryHarness(other, run_metadata=boundary.run_metadata) as harness:
        session = await harness.create_session(SessionSpec())
        dying = WorkerProcess(other, concurrency=2, loglevel="warning", name="lost-queue-a")
        task = await lost_mid_run(
            session, dying, "lost on the other queue", boundary, sync_redis, keys
        )
        task_id = task.id.value
        boundary.release()
        await asyncio.sleep(settings.sweep_interval.total_seconds() + 2)
        assert len(boundary.calls_for(task_id)) == 1  # no worker of the sweeper's queue ran it
        queued = sum(sync_redis.llen(name) for name in Keys.broker_queue_lists(other.queue))
        assert queued == 1, queued
        with WorkerProcess(other, concurrency=2, loglevel="warning", name="lost-queue-b"):
            async with asyncio.timeout(60):
                outcome = await task.await_outcome()
        assert isinstance(outcome, Completed), outcome
        assert len(boundary.calls_for(task_id)) == 2
