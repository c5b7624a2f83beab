"""Only lost deliveries count: a run handed back gracefully is neither lost nor exhausted.

Workers are separate OS processes. SIGTERM goes to a worker's whole process group (as
systemd's control-group kill or ``kill -TERM -<pgid>`` deliver it): the main process
starts its warm shutdown, the pool child running the task hands its run back (graph run
cancelled, lease released, record marked) and the message is requeued. Another worker
then resumes the task. A SIGKILL, by contrast, is a loss and still counts.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import redis
from agent_harness_protocol import (
    AgentUsage,
    Cancelled,
    Completed,
    Failed,
    SessionSpec,
    TaskRequest,
    TextInput,
)
from redis.asyncio import Redis as AsyncRedis

from harness import CeleryHarness
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings, WorkerLossPolicy

from .support.boundary import ModelBoundary
from .support.fault_pool import Pool, fault_settings
from .support.keyspace import task_record, terminal_entries
from .support.waiting import until

pytestmark = pytest.mark.processes


@pytest.mark.parametrize(
    ("policy", "max_deliveries"),
    [(WorkerLossPolicy.RESUME, 1), (WorkerLossPolicy.UNRESOLVED, 3)],
)
async def test_a_run_handed_back_by_sigterm_completes_on_another_worker(
    settings: Settings,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
    policy: WorkerLossPolicy,
    max_deliveries: int,
) -> None:
    """With ``max_deliveries=1`` (one lost delivery ends the task) or under
    ``on_worker_loss=unresolved`` (a lost run is never resumed), a task whose worker
    was sent SIGTERM mid-call still completes, on the other worker, with one more model
    call: the hand-back is not a loss."""
    workers = Pool(fault_settings(settings, on_worker_loss=policy, max_deliveries=max_deliveries))
    workers.start()
    try:
        async with CeleryHarness(
            workers.settings, profile="confirmed", run_metadata=boundary.run_metadata
        ) as harness:
            session = await harness.create_session(SessionSpec())
            boundary.hold()
            task = await session.start_task(TaskRequest(TextInput("handed-back-by-sigterm")))
            await until(lambda: bool(boundary.calls_for(task.id.value)), "the first call")
            first = boundary.calls_for(task.id.value)[0]
            stopping = workers.owner_of(int(str(first["pid"])))
            assert stopping.pid is not None
            os.killpg(stopping.pid, signal.SIGTERM)
            # The other worker takes the requeued message and calls the model again.
            await until(
                lambda: len(boundary.calls_for(task.id.value)) >= 2 or task.state.is_terminal,
                "the second call",
            )
            assert not task.state.is_terminal, await task.await_outcome()
            boundary.release()
            outcome = await asyncio.wait_for(task.await_outcome(), 30)
            assert isinstance(outcome, Completed), outcome
            calls = boundary.calls_for(task.id.value)
            assert len(calls) == 2
            assert calls[1]["pid"] != first["pid"]
            assert boundary.was_cancelled(task.id.value)  # the first call was stopped
            # The group's SIGTERM alone ends it, with a warm shutdown's exit code. Not
            # stop(): its own SIGTERM could land while the interpreter is exiting, after
            # Python restored the default handler, and kill it (-15).
            await until(lambda: not stopping.running, "the warm shutdown", within=60)
            assert stopping.returncode == 0
            record = task_record(sync_redis, workers.settings.namespace, task.id.value)
            assert record[TaskField.DELIVERIES] == "1"  # the hand-back returned its delivery
            assert terminal_entries(sync_redis, workers.settings.namespace, task.id.value) == 1
            assert boundary.overlaps == 0
    finally:
        boundary.release()
        workers.stop()


async def test_a_killed_run_still_counts_as_a_lost_delivery(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """The same with SIGKILL: the run is lost, and ``max_deliveries=1`` ends the task."""
    workers = Pool(fault_settings(settings, max_deliveries=1))
    workers.start()
    try:
        async with CeleryHarness(
            workers.settings, profile="confirmed", run_metadata=boundary.run_metadata
        ) as harness:
            session = await harness.create_session(SessionSpec())
            boundary.hold()
            task = await session.start_task(TaskRequest(TextInput("killed-once")))
            await until(lambda: bool(boundary.calls_for(task.id.value)), "the first call")
            first = boundary.calls_for(task.id.value)[0]
            await asyncio.to_thread(workers.replace, workers.owner_of(int(str(first["pid"]))))
            outcome = await asyncio.wait_for(task.await_outcome(), 30)
            assert isinstance(outcome, Failed)
            assert "max_deliveries" in outcome.message
            assert len(boundary.calls_for(task.id.value)) == 1
    finally:
        boundary.release()
        workers.stop()


async def test_a_resumed_task_cancelled_before_its_model_call_has_unknown_usage(
    pool_settings: Settings, boundary: ModelBoundary
) -> None:
    """A task whose worker was SIGKILLed mid-call resumes on the other worker and is
    cancelled before that run calls the model: the cancel is sent the moment the task
    record shows the new claim's fence, while the run loads (and decodes, for some 50 ms)
    a checkpoint of about four megabytes. The lost run
    called the model and may have used tokens: usage unknown, never measured zero. The
    boundary confirms the resumed run never invoked the model."""
    workers = Pool(pool_settings)
    workers.start()
    try:
        async with CeleryHarness(
            workers.settings, profile="confirmed", run_metadata=boundary.run_metadata
        ) as harness:
            session = await harness.create_session(SessionSpec())
            for turn in range(4):
                big = await session.start_task(TaskRequest(TextInput(f"history{turn} " * 100_000)))
                assert isinstance(await asyncio.wait_for(big.await_outcome(), 60), Completed)
            boundary.hold()
            task = await session.start_task(TaskRequest(TextInput("resumed-then-cancelled")))
            await until(lambda: bool(boundary.calls_for(task.id.value)), "the first call")
            first = boundary.calls_for(task.id.value)[0]
            key = Keys(workers.settings.namespace).task(task.id.value)
            watcher = AsyncRedis.from_url(workers.settings.redis_url, decode_responses=True)
            try:
                fence = await watcher.hget(key, TaskField.FENCE)
                await asyncio.to_thread(workers.owner_of(int(str(first["pid"]))).kill)
                async with asyncio.timeout(60):
                    while await watcher.hget(key, TaskField.FENCE) == fence:  # noqa: ASYNC110
                        await asyncio.sleep(0.0005)
            finally:
                await watcher.aclose()
            await task.request_cancellation()
            outcome = await asyncio.wait_for(task.await_outcome(), 30)
            assert isinstance(outcome, Cancelled), outcome
            assert outcome.usage == AgentUsage.UNKNOWN, outcome.usage
            assert len(boundary.calls_for(task.id.value)) == 1  # the resumed run never called
    finally:
        boundary.release()
        workers.stop()


@pytest.fixture
def pool_settings(settings: Settings) -> Settings:
    return fault_settings(settings)
