"""A run whose worker process is SIGKILLed mid-run, recovered by a sweeper."""

from __future__ import annotations

import redis
from agent_harness_protocol import TaskRequest, TextInput

from harness.session import CelerySession
from harness.task import CeleryTask
from tooling.worker_process import WorkerProcess
from wire.keys import Keys
from wire.records import TaskField

from .boundary import ModelBoundary
from .waiting import wait_for


async def lost_mid_run(
    session: CelerySession,
    worker: WorkerProcess,
    text: str,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
    keys: Keys,
) -> CeleryTask:
    """Start ``worker``, start a task of ``text`` in ``session``, SIGKILL the worker once
    its model call is made (the boundary should hold calls), and wait until a sweeper
    recovered the lapsed lease (the record's ``recoveries`` is 1); the task."""
    worker.start()
    try:
        task = await session.start_task(TaskRequest(TextInput(text)))
        task_id = task.id.value
        await wait_for(lambda: boundary.calls_for(task_id), within=30)
    finally:
        worker.kill()
    await wait_for(
        lambda: sync_redis.hget(keys.task(task_id), TaskField.RECOVERIES) == "1", within=60
    )
    return task


__all__ = ["lost_mid_run"]
