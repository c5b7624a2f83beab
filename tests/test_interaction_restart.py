"""An approval answered after every worker process was replaced resumes the task and
performs its effect exactly once.

The workers are separate OS processes (``celery worker``, prefork). While the task waits
for its caller, every one of them is killed (process group destroyed, like lost machines)
and new ones are started; the answer then resumes the paused graph from its checkpoint in
a process that did not exist when the task paused. The effect is recorded where it
happens (the tool, inside the worker, in Redis); the processes are told apart by the pids
the model and the tool recorded.
"""

from __future__ import annotations

import asyncio

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

from tooling.worker_process import WorkerProcess
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.controlled_model import PREFIX, process_alive
from .support.fixtures import scoped_harness
from .support.waiting import wait_for

pytestmark = pytest.mark.processes


@pytest.fixture
def restart_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"namespace": settings.namespace + "-restart", "queue": settings.queue + ".restart"}
    )


def _workers(settings: Settings, generation: str) -> list[WorkerProcess]:
    return [
        WorkerProcess(settings, concurrency=1, name=f"restart-{generation}-{index}")
        for index in range(2)
    ]


async def test_an_approval_answered_after_all_workers_restarted_performs_the_effect_once(
    restart_settings: Settings, boundary: ModelBoundary
) -> None:
    first = _workers(restart_settings, "first")
    second = _workers(restart_settings, "second")
    harness = scoped_harness(restart_settings, boundary, "guarding")
    try:
        for process in first:
            process.start()
        task = await (await harness.create_session(SessionSpec())).start_task(
            TaskRequest(TextInput("guarded-effect"))
        )
        await wait_for(lambda: bool(task.pending_interactions), within=60)
        (request,) = task.pending_interactions
        (asked,) = boundary.calls_for(task.id.value)
        for process in first:
            process.kill()
        assert not process_alive(int(str(asked["pid"])))
        for process in second:
            process.start()
        assert boundary.effect_count() == 0

        await task.respond(request.interaction_id, ApprovalResponse(ApprovalDecision.APPROVE_ONCE))
        outcome = await task.await_outcome()

        assert isinstance(outcome, Completed)
        assert boundary.effect_count() == 1
        (effect,) = boundary.effects_for(task.id.value)
        assert process_alive(int(effect["pid"]))  # performed by the new generation
        calls = boundary.calls_for(task.id.value)
        assert len(calls) == 2
        resumed_in = int(str(calls[1]["pid"]))
        assert resumed_in != int(str(asked["pid"]))
        assert process_alive(resumed_in)  # a process of the new generation
    finally:
        await harness.aclose()
        for process in (*first, *second):
            process.stop()


async def test_a_paused_task_holds_no_slot_of_a_single_slot_worker(
    restart_settings: Settings, boundary: ModelBoundary
) -> None:
    """One worker process with one slot: while a task waits for its caller, another
    session's tasks run on that slot, and the answer then resumes the paused task there."""
    worker = WorkerProcess(restart_settings, concurrency=1, name="restart-single-slot")
    guarding = scoped_harness(restart_settings, boundary, "guarding")
    plain = scoped_harness(restart_settings, boundary, "confirmed")
    try:
        worker.start()
        paused = await (await guarding.create_session(SessionSpec())).start_task(
            TaskRequest(TextInput("guarded-effect"))
        )
        await wait_for(lambda: bool(paused.pending_interactions), within=60)
        session = await plain.create_session(SessionSpec())
        for index in range(2):
            other = await session.start_task(TaskRequest(TextInput(f"meanwhile {index}")))
            assert isinstance(await other.await_outcome(), Completed)
        assert not paused.state.is_terminal
        (request,) = paused.pending_interactions
        await paused.respond(
            request.interaction_id, ApprovalResponse(ApprovalDecision.APPROVE_ONCE)
        )
        assert isinstance(await paused.await_outcome(), Completed)
        assert boundary.effect_count() == 1
    finally:
        await guarding.aclose()
        await plain.aclose()
        worker.stop()


async def test_a_resumed_run_lost_before_its_approved_effect_resumes_again_and_performs_it_once(
    restart_settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """The approved tool's first run kills its worker process before the effect: the task,
    resumed from its interrupt, lost its run; the next run (another process) resumes it
    from the interrupt again with the recorded answer, without asking, and performs the
    effect once."""
    workers = _workers(restart_settings, "fragile")
    harness = scoped_harness(restart_settings, boundary, "guarding-fragile")
    try:
        for process in workers:
            process.start()
        task = await (await harness.create_session(SessionSpec())).start_task(
            TaskRequest(TextInput("fragile-effect"))
        )
        await wait_for(lambda: bool(task.pending_interactions), within=60)
        (request,) = task.pending_interactions
        await task.respond(request.interaction_id, ApprovalResponse(ApprovalDecision.APPROVE_ONCE))
        outcome = await asyncio.wait_for(task.await_outcome(), 120)
        assert isinstance(outcome, Completed)
        (effect,) = boundary.effects_for(task.id.value)
        assert effect["tool"] == "fragile_effect"
        # The pid the tool's first run recorded before it killed its worker.
        killed = int(str(sync_redis.get(f"{PREFIX}fragile:{task.id.value}")))
        assert effect["pid"] != killed
        assert not task.pending_interactions  # never asked again
    finally:
        await harness.aclose()
        for process in workers:
            process.stop()
