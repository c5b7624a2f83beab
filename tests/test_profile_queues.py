"""Queues by profile: a task of a profile that names a queue runs only on that queue.

The session's in-process worker pool serves the deployment's queue only. The profiles
``confirmed-q2`` and ``guarding-q2`` name the queue ``q2``: their tasks must not run
there, whatever republishes them (the start, its sweeps, an approval's resume, a lost
run's recovery by the in-process pool's sweeper), and must run on a worker OS process
started with ``queues=("q2",)``, as ``ahp-celery worker --queues q2`` starts it. What ran
is observed at the model boundary (each model call is recorded where it happens).
"""

from __future__ import annotations

import asyncio
import os

import pytest
import redis
from agent_harness_protocol import (
    ApprovalDecision,
    ApprovalResponse,
    Completed,
    SessionSpec,
    TaskRequest,
    TextInput,
)

from harness import CeleryHarness
from harness.transport import TaskPublisher
from tooling.worker_process import WorkerProcess
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.fixtures import scoped_harness
from .support.lost_workers import lost_mid_run
from .support.profiles import SECOND_QUEUE
from .support.sweeps import watch_past_sweeps
from .support.waiting import wait_for

pytestmark = pytest.mark.processes


class _Unsent(TaskPublisher):
    """Reports every publish as done and sends nothing: a start only a sweep can run."""

    async def publish(
        self, task_id: str, session_id: str | None = None, queue: str | None = None
    ) -> None:
        return None


def _second_queue_worker(settings: Settings, name: str) -> WorkerProcess:
    return WorkerProcess(
        settings, concurrency=2, loglevel="warning", name=name, queues=(SECOND_QUEUE,)
    )


def _waiting_on(client: redis.Redis, queue: str) -> int:
    return sum(int(client.llen(name)) for name in Keys.broker_queue_lists(queue))


async def test_a_task_of_a_profile_queue_runs_only_on_a_worker_of_that_queue(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    harness = scoped_harness(settings, boundary, "confirmed-q2")
    try:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("only on q2")))
        task_id = task.id.value
        # The default pool served, and swept past this start: it ran nothing of it.
        await watch_past_sweeps(settings, boundary, sync_redis)
        assert boundary.calls_for(task_id) == []
        assert sync_redis.hget(keys.task(task_id), TaskField.QUEUE) == SECOND_QUEUE
        assert _waiting_on(sync_redis, SECOND_QUEUE) == 1
        assert sync_redis.hget(keys.task(task_id), TaskField.STATE) == "starting"
        assert _waiting_on(sync_redis, settings.queue) == 0
        with _second_queue_worker(settings, "q2-start"):
            async with asyncio.timeout(60):
                outcome = await task.await_outcome()
        assert isinstance(outcome, Completed), outcome
        (call,) = boundary.calls_for(task_id)
        assert int(str(call["pid"])) != os.getpid()  # not the in-process pool
    finally:
        await harness.aclose()


async def test_an_approval_on_a_profile_queue_resumes_on_that_queue(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """The task pauses on a ``q2`` worker; that worker stops; the approval's resume is
    published to ``q2``, where it waits (the default pool never runs it) until a ``q2``
    worker resumes it and the approved effect happens, once."""
    keys = Keys(settings.namespace)
    harness = scoped_harness(settings, boundary, "guarding-q2")
    try:
        session = await harness.create_session(SessionSpec())
        with _second_queue_worker(settings, "q2-ask"):
            task = await session.start_task(TaskRequest(TextInput("guarded on q2")))
            task_id = task.id.value
            await wait_for(lambda: bool(task.pending_interactions), within=60)
        (request,) = task.pending_interactions
        assert len(boundary.calls_for(task_id)) == 1
        await task.respond(request.interaction_id, ApprovalResponse(ApprovalDecision.APPROVE_ONCE))
        await wait_for(lambda: _waiting_on(sync_redis, SECOND_QUEUE) == 1, within=10)
        await watch_past_sweeps(settings, boundary, sync_redis)
        assert len(boundary.calls_for(task_id)) == 1  # no resume ran on the default pool
        assert boundary.effect_count() == 0
        assert _waiting_on(sync_redis, settings.queue) == 0
        assert sync_redis.hget(keys.task(task_id), TaskField.STATE) == "awaiting_response"
        with _second_queue_worker(settings, "q2-resume"):
            async with asyncio.timeout(60):
                outcome = await task.await_outcome()
        assert isinstance(outcome, Completed), outcome
        assert len(boundary.calls_for(task_id)) == 2
        assert boundary.effect_count() == 1
    finally:
        await harness.aclose()


async def test_a_run_lost_on_a_profile_queue_is_republished_on_that_queue(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """The ``q2`` worker is SIGKILLed mid-run; the in-process pool's sweeper (serving the
    default queue only) recovers the lapsed lease and republishes the run on the queue
    the task's record names, ``q2``, never its own: the default pool does not run it, a
    new ``q2`` worker resumes it."""
    keys = Keys(settings.namespace)
    boundary.hold()
    harness = scoped_harness(settings, boundary, "confirmed-q2")
    try:
        session = await harness.create_session(SessionSpec())
        dying = _second_queue_worker(settings, "q2-dying")
        task = await lost_mid_run(session, dying, "lost on q2", boundary, sync_redis, keys)
        task_id = task.id.value
        boundary.release()
        await watch_past_sweeps(settings, boundary, sync_redis)
        assert len(boundary.calls_for(task_id)) == 1  # the default pool never ran it
        # Republished on q2 (again after the hold-off while no q2 worker took it).
        assert _waiting_on(sync_redis, SECOND_QUEUE) >= 1
        assert _waiting_on(sync_redis, settings.queue) == 0
        with _second_queue_worker(settings, "q2-after"):
            async with asyncio.timeout(60):
                outcome = await task.await_outcome()
        assert isinstance(outcome, Completed), outcome
        assert len(boundary.calls_for(task_id)) == 2
    finally:
        boundary.release()
        await harness.aclose()


async def test_a_worker_sweeps_the_unclaimed_starts_of_the_queues_it_consumes(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """A worker OS process started with ``-Q <queue>`` (and no ``AHP_WORKER_QUEUES``)
    judges that queue's unclaimed starts: a start recorded as published whose message
    never reached the broker is republished by its sweeper, on that queue, and runs
    there. No other sweeper judges that queue (the in-process pool's judges its own)."""
    own = f"{settings.queue}.swept"
    caller = settings.model_copy(update={"queue": own})
    keys = Keys(settings.namespace)
    async with CeleryHarness(
        caller, profile="confirmed", run_metadata=boundary.run_metadata, publisher_factory=_Unsent
    ) as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("unsent on its queue")))
        task_id = task.id.value
        assert sync_redis.hget(keys.task(task_id), TaskField.QUEUE) == own
        with WorkerProcess(
            settings, concurrency=2, loglevel="warning", name="swept", queues=(own,)
        ):
            async with asyncio.timeout(60):
                outcome = await task.await_outcome()
        assert isinstance(outcome, Completed), outcome
        (call,) = boundary.calls_for(task_id)
        assert int(str(call["pid"])) != os.getpid()
