"""Faults a worker pool meets, with workers as separate OS processes.

Each test breaks something for real (SIGKILL of a worker, a message delivered twice, a
caller process killed) on the session's fault pool and then checks the three promises: no
admitted task is lost, each task has exactly one terminal outcome, and two graph runs
never ran on one session at once (the controlled model counts calls of one session that
overlapped while both processes were alive). Faults that need a pool of their own (the
``unresolved`` policy, a prefork layout, no worker yet) are in
``tests/test_faults_own_pools.py``; Redis restarts in ``tests/test_redis_restart.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest
import redis
from agent_harness_protocol import (
    AgentTask,
    Completed,
    PersistenceRequirement,
    PersistentSessionRef,
    ProviderId,
    SessionRequirements,
    SessionSpec,
    StorageNamespace,
    TaskEvent,
    TaskRequest,
    TerminalEvent,
    TextInput,
    Warning,
)
from celery import Celery

from harness.errors import SessionBusyError
from tooling.worker_process import PROJECT_ROOT, settings_environment
from wire.celery_config import RUN_TASK, celery_config
from wire.store import ClaimResult

from .support.boundary import ModelBoundary
from .support.claims import ClaimCounts
from .support.fault_harness import harness_of
from .support.fault_pool import Pool
from .support.keyspace import task_record, terminal_entries
from .support.waiting import until

pytestmark = pytest.mark.processes

PERSISTENT = SessionSpec(requirements=SessionRequirements(persistence=PersistenceRequirement()))


@pytest.fixture
def pool(fault_pool: Pool) -> Pool:
    """The session's two fault-pool workers; tests that kill one replace it."""
    return fault_pool


async def _collect(task: AgentTask) -> list[TaskEvent]:
    return [event async for event in task.events()]


async def test_sigkill_mid_task_resumes_from_the_last_checkpoint_each_time(
    pool: Pool, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """Kill the worker running a task twice in a row: the task resumes on another worker
    from the session's last checkpoint under a higher fence each time, then completes
    once. Its input reaches the thread once; its usage is unknown."""
    async with harness_of(pool) as harness:
        session = await harness.create_session(SessionSpec())
        first = await session.start_task(TaskRequest(TextInput("history-marker")))
        assert isinstance(await asyncio.wait_for(first.await_outcome(), 30), Completed)
        boundary.hold()
        task = await session.start_task(TaskRequest(TextInput("survives-two-kills")))
        events = asyncio.create_task(_collect(task))
        fences: list[int] = []
        for kill in range(1, 3):
            await until(lambda n=kill: len(boundary.calls_for(task.id.value)) >= n)
            call = boundary.calls_for(task.id.value)[-1]
            fences.append(
                int(task_record(sync_redis, pool.settings.namespace, task.id.value)["fence"])
            )
            await asyncio.to_thread(pool.replace, pool.owner_of(int(str(call["pid"]))))
        await until(lambda: len(boundary.calls_for(task.id.value)) >= 3)
        boundary.release()
        outcome = await asyncio.wait_for(task.await_outcome(), 30)
        seen = await asyncio.wait_for(events, 10)

        assert isinstance(outcome, Completed)
        assert outcome.usage.input_tokens is None
        assert outcome.usage.total_tokens is None
        assert sum(isinstance(event, TerminalEvent) for event in seen) == 1
        assert isinstance(seen[-1], TerminalEvent)
        assert sum(isinstance(event, Warning) for event in seen) == 2
        record = task_record(sync_redis, pool.settings.namespace, task.id.value)
        assert record["deliveries"] == "3"
        assert fences[0] < fences[1] < int(record["fence"])
        assert terminal_entries(sync_redis, pool.settings.namespace, task.id.value) == 1
        # Every run saw the earlier turn from the checkpoint, and the input exactly once.
        calls = boundary.calls_for(task.id.value)
        assert len(calls) == 3
        for call in calls:
            texts = list(call["texts"])  # type: ignore[call-overload]
            assert "history-marker" in texts
            assert texts.count("survives-two-kills") == 1
        follow = await session.start_task(TaskRequest(TextInput("after-the-kills")))
        assert isinstance(await asyncio.wait_for(follow.await_outcome(), 30), Completed)
        texts = list(boundary.calls_for(follow.id.value)[0]["texts"])  # type: ignore[call-overload]
        assert texts.count("survives-two-kills") == 1
        assert boundary.overlaps == 0


async def test_a_duplicate_delivery_never_starts_a_second_run(
    pool: Pool, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """The same message delivered again (as after a visibility timeout) while the first
    run is alive, and again after it settled: both copies are dropped."""
    producer = Celery("duplicate-producer", set_as_current=False)
    producer.conf.update(celery_config(pool.settings))
    settings = pool.settings

    def deliver_again(task_id: str, session_id: str) -> None:
        producer.send_task(
            RUN_TASK,
            kwargs={"namespace": settings.namespace, "task_id": task_id, "session_id": session_id},
            task_id=task_id,
            queue=settings.queue,
        )

    try:
        async with harness_of(pool) as harness:
            session = await harness.create_session(SessionSpec())
            boundary.hold()
            task = await session.start_task(TaskRequest(TextInput("delivered-twice")))
            await until(lambda: bool(boundary.calls_for(task.id.value)))
            fence = task_record(sync_redis, settings.namespace, task.id.value)["fence"]
            claims = ClaimCounts(sync_redis, settings.namespace)
            for _ in range(3):
                await asyncio.to_thread(deliver_again, task.id.value, session.id.value)
            # The claim looked at each copy while the first run held the session.
            await claims.consumed(ClaimResult.BUSY, 3, "copies of the running task")
            assert boundary.in_flight() == 1
            boundary.release()
            assert isinstance(await asyncio.wait_for(task.await_outcome(), 30), Completed)
            await asyncio.to_thread(deliver_again, task.id.value, session.id.value)
            since = await claims.consumed(ClaimResult.TERMINAL, 1, "the copy of the settled task")
            assert since[ClaimResult.CLAIMED] == 0, since
            record = task_record(sync_redis, settings.namespace, task.id.value)
            assert record["deliveries"] == "1"
            assert record["fence"] == fence
            assert len(boundary.calls_for(task.id.value)) == 1
            assert terminal_entries(sync_redis, settings.namespace, task.id.value) == 1
            assert boundary.overlaps == 0
    finally:
        producer.close()


_CALLER = textwrap.dedent(
    """
    import asyncio, json, sys
    from agent_harness_protocol import (
        PersistenceRequirement, SessionRequirements, SessionSpec, TaskRequest, TextInput,
    )
    from harness import CeleryHarness
    from wire.settings import Settings

    async def main() -> None:
        harness = CeleryHarness(Settings(), profile="confirmed")
        spec = SessionSpec(requirements=SessionRequirements(persistence=PersistenceRequirement()))
        session = await harness.create_session(spec)
        first = await session.start_task(TaskRequest(TextInput("caller-one-marker")))
        await first.await_outcome()
        print("first-done", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        second = await session.start_task(TaskRequest(TextInput("outlives-its-caller")))
        ref = session.persistent_ref
        print(json.dumps({"id": ref.id, "namespace": ref.namespace.value,
                          "provider": ref.provider.value, "task": second.id.value}), flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_a_killed_caller_does_not_stop_its_task_and_another_process_reopens(
    pool: Pool, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """The caller process is SIGKILLed while its task runs. The task still completes;
    this process (another OS process) reopens the session, and its next task sees the
    whole history: persistence across process restarts."""
    env = {**os.environ, **settings_environment(pool.settings)}
    env = {key: value for key, value in env.items() if value is not None}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    caller = subprocess.Popen(  # noqa: ASYNC220 (read from a thread below)
        [sys.executable, "-c", _CALLER],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=PROJECT_ROOT,
    )
    try:
        assert caller.stdout is not None
        assert caller.stdin is not None
        first = await asyncio.wait_for(asyncio.to_thread(caller.stdout.readline), 60)
        assert first.strip() == b"first-done"
        boundary.hold()
        caller.stdin.write(b"go\n")
        caller.stdin.flush()
        line = await asyncio.wait_for(asyncio.to_thread(caller.stdout.readline), 60)
        started = json.loads(line)
        task_id = str(started["task"])
        await until(lambda: bool(boundary.calls_for(task_id)))
    finally:
        caller.kill()
        caller.wait()
    reference = PersistentSessionRef(
        ProviderId(started["provider"]), StorageNamespace(started["namespace"]), started["id"]
    )
    async with harness_of(pool) as harness:
        with pytest.raises(SessionBusyError):
            await harness.reopen_session(reference, PERSISTENT)
        boundary.release()
        await until(
            lambda: (
                task_record(sync_redis, pool.settings.namespace, task_id).get("state")
                == "completed"
            )
        )
        session = await harness.reopen_session(reference, PERSISTENT)
        assert session.persistent_ref == reference
        task = await session.start_task(TaskRequest(TextInput("after-the-caller-died")))
        assert isinstance(await asyncio.wait_for(task.await_outcome(), 30), Completed)
        texts = list(boundary.calls_for(task.id.value)[0]["texts"])  # type: ignore[call-overload]
        assert "caller-one-marker" in texts
        assert "outlives-its-caller" in texts
        assert terminal_entries(sync_redis, pool.settings.namespace, task_id) == 1
        assert boundary.overlaps == 0
