"""Only a settled task's run message is revoked.

Celery workers discard a revoked task id on every delivery for three hours (their revoke
expiry), and the sweeper's republish of a task carries the same id. A running task whose
run was handed back (its worker stopping) needs one more delivery to settle a
cancellation requested meanwhile: had its message been revoked, every worker that heard
the revoke would discard that delivery and each republish after it, and the task would
stay unsettled for hours.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from datetime import timedelta
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import AgentUsage, Cancelled, SessionSpec, TaskRequest, TextInput

from harness import CeleryHarness
from tooling.worker_process import WorkerProcess
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.waiting import wait_for

pytestmark = pytest.mark.processes


@pytest.fixture
def two_workers(settings: Settings) -> Iterator[list[WorkerProcess]]:
    """Two single-process workers: while one runs a task, it takes no other message."""
    suffix = uuid4().hex[:6]
    own = settings.model_copy(
        update={
            "namespace": f"revoke-{suffix}",
            "queue": f"ahp.revoke.{suffix}",
            "lease_ttl": timedelta(seconds=2),
            "sweep_interval": timedelta(seconds=0.25),
        }
    )
    workers = [WorkerProcess(own, concurrency=1, name="revoke") for _ in range(2)]
    try:
        for worker in workers:
            worker.start()
        yield workers
    finally:
        for worker in workers:
            worker.kill()
            worker.log_path.unlink(missing_ok=True)


async def test_a_run_handed_back_then_cancelled_is_settled_by_its_next_delivery(
    two_workers: list[WorkerProcess], boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """One worker runs X, the other T (both model calls held). T's worker is stopped: it
    hands T back, and the message waits on the queue behind busy X. T is cancelled (the
    other worker is alive to hear any revoke), then X is released: T's next delivery
    claims it and settles ``Cancelled``."""
    settings = two_workers[0].settings
    async with CeleryHarness(
        settings, profile="confirmed", run_metadata=boundary.run_metadata
    ) as harness:
        boundary.hold()
        busy = await (await harness.create_session(SessionSpec())).start_task(
            TaskRequest(TextInput("keeps the other worker busy"))
        )
        target = await (await harness.create_session(SessionSpec())).start_task(
            TaskRequest(TextInput("handed back, then cancelled"))
        )
        await wait_for(lambda: boundary.calls_for(busy.id.value))
        await wait_for(lambda: boundary.calls_for(target.id.value))
        pid = int(str(boundary.calls_for(target.id.value)[0]["pid"]))
        stopping = next(worker for worker in two_workers if worker.pid == os.getpgid(pid))
        assert stopping.pid is not None
        os.killpg(stopping.pid, signal.SIGTERM)  # the pool child hands its run back
        await wait_for(lambda: not stopping.running, within=60)
        record = sync_redis.hgetall(Keys(settings.namespace).task(target.id.value))
        assert record[TaskField.STATE] == "running", record
        assert record.get(TaskField.HANDED_BACK) == "1", record

        await target.request_cancellation()
        boundary.release()
        outcome = await asyncio.wait_for(asyncio.shield(target.await_outcome()), 30)
        assert isinstance(outcome, Cancelled), outcome
        # The handed-back run may have used tokens nobody measured.
        assert outcome.usage == AgentUsage.UNKNOWN
        assert len(boundary.calls_for(target.id.value)) == 1  # never ran again
