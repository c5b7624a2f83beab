"""A tool whose worker dies mid-effect: its declared delivery holds, and the caller is told.

The tool (``tests.support.tools:dying_effect``, approval-gated) records every execution
where it runs and performs its effect once per idempotency key; its first attempt in a
task performs the effect and kills its own worker process (SIGKILL) before returning.
Another worker process resumes the task from the approval interrupt:

- ``at_least_once`` (the default): the call runs again, as attempt 2, with the same
  idempotency key, so the effect happens once; the caller's stream closes attempt 1 as
  failed, warns, and reports attempt 2 as its own work (``<call id>#2``) with its own
  ``EffectChanged``;
- ``at_most_once``: the call never runs again; the model reads that its outcome is
  unknown, and the caller's stream closes attempt 1 as failed with a ``Warning``.

Before attempts were counted, the call ran again with nothing said: two executions (two
effects without a key to deduplicate by), ``ToolCallChanged`` started twice under one
work id, and a single ``EffectChanged``.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict

import pytest
import redis
from agent_harness_protocol import (
    ApprovalDecision,
    ApprovalResponse,
    Completed,
    EffectChanged,
    SessionSpec,
    TaskEvent,
    TaskRequest,
    TextInput,
    ToolCallChanged,
    Warning,
    WorkStatus,
)

from tooling.worker_process import WorkerProcess
from wire.keys import Keys
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.fixtures import scoped_harness
from .support.tools import EXECUTIONS
from .support.waiting import wait_for

pytestmark = pytest.mark.processes


@pytest.fixture
def dying_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"namespace": settings.namespace + "-dying", "queue": settings.queue + ".dying"}
    )


def _executions(client: redis.Redis, task_id: str) -> list[dict[str, object]]:
    found = [json.loads(item) for item in client.lrange(EXECUTIONS, 0, -1)]
    return [execution for execution in found if execution["task"] == task_id]


@pytest.mark.parametrize("delivery", ["at_least_once", "at_most_once"])
async def test_a_tool_whose_worker_dies_mid_effect_keeps_its_declared_delivery(
    dying_settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis, delivery: str
) -> None:
    profile = "guarding-dying" if delivery == "at_least_once" else "guarding-dying-once"
    workers = [
        WorkerProcess(dying_settings, concurrency=1, name=f"dying-{index}") for index in range(2)
    ]
    harness = scoped_harness(dying_settings, boundary, profile)
    received: list[TaskEvent] = []
    try:
        for process in workers:
            process.start()
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("dying-effect")))
        events = task.events()

        async def drain() -> None:
            async for event in events:
                received.append(event)

        following = asyncio.ensure_future(drain())
        await wait_for(lambda: bool(task.pending_interactions), within=60)
        (request,) = task.pending_interactions
        await task.respond(request.interaction_id, ApprovalResponse(ApprovalDecision.APPROVE_ONCE))
        async with asyncio.timeout(120):
            outcome = await task.await_outcome()
            await following
    finally:
        await harness.aclose()
        for process in workers:
            process.stop()
    assert isinstance(outcome, Completed), outcome
    task_id = task.id.value
    executions = _executions(sync_redis, task_id)
    effects = boundary.effects_for(task_id)
    # The first attempt performed the effect, then its worker died.
    assert len(effects) == 1, effects
    killed = executions[0]["pid"]
    call_id = str(request.work_id.value)  # type: ignore[union-attr]

    changes: dict[str, list[WorkStatus]] = defaultdict(list)
    for event in received:
        if isinstance(event, ToolCallChanged):
            changes[event.work_id.value].append(event.status)
    completed_effects = [
        event
        for event in received
        if isinstance(event, EffectChanged) and event.status is WorkStatus.COMPLETED
    ]
    warnings = [event.message for event in received if isinstance(event, Warning)]
    # Attempt 1 reads as one run that failed, whether or not its start reached the stream.
    assert changes[call_id] in ([WorkStatus.FAILED], [WorkStatus.STARTED, WorkStatus.FAILED])
    assert all(statuses.count(WorkStatus.STARTED) <= 1 for statuses in changes.values()), changes
    if delivery == "at_least_once":
        assert len(executions) == 2, executions
        assert {execution["key"] for execution in executions} == {f"{task_id}:{call_id}"}
        assert executions[1]["pid"] != killed
        assert changes[f"{call_id}#2"] == [WorkStatus.STARTED, WorkStatus.COMPLETED], changes
        assert set(changes) == {call_id, f"{call_id}#2"}, changes
        assert [event.work_id.value for event in completed_effects] == [f"{call_id}#2"]
        assert any("runs again as attempt 2" in message for message in warnings), warnings
    else:
        assert len(executions) == 1, executions
        assert set(changes) == {call_id}, changes
        assert completed_effects == []
        assert any("at-most-once" in message for message in warnings), warnings
        last_call = boundary.calls_for(task_id)[-1]
        assert any(
            "outcome of this tool call is unknown" in str(text) for text in last_call["texts"]
        )  # type: ignore[union-attr]
    attempts = sync_redis.hgetall(Keys(dying_settings.namespace).tool_attempts(task_id))
    assert attempts == {call_id: "2"}, attempts
