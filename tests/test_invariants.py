"""The design's invariants, each shown by a test that fails when it is broken."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis
from agent_harness_protocol import (
    AgentUsage,
    Cancelled,
    Completed,
    SessionSpec,
    TaskRequest,
    TaskState,
    TextInput,
    Unresolved,
    UnresolvedReason,
)
from langgraph.checkpoint.redis.aio import AsyncRedisSaver

from harness import CeleryHarness, SessionBusyError
from harness.session import CelerySession
from wire.codec import loads, outcome_to_json
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings
from wire.store import ClaimResult, RecordStore

from .support.boundary import ModelBoundary
from .support.claims import ClaimCounts
from .support.keyspace import event_kinds
from .support.waiting import wait_for


def _request(text: str) -> TaskRequest:
    return TaskRequest(TextInput(text))


async def test_two_harnesses_racing_start_task_never_run_two_graphs_on_one_thread(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with (
        CeleryHarness(settings, profile="confirmed") as first,
        CeleryHarness(settings, profile="confirmed") as second,
    ):
        session = await first.create_session(SessionSpec())
        # A second handle on the same session record and checkpoint thread, owned by
        # another harness (the public route is reopen_session, once sessions persist).
        alias = CelerySession(second._open(), session.id, session.spec)
        started = 0
        for round_number in range(12):
            results = await asyncio.gather(
                session.start_task(_request(f"race-{round_number}-first")),
                alias.start_task(_request(f"race-{round_number}-second")),
                return_exceptions=True,
            )
            tasks = [result for result in results if not isinstance(result, BaseException)]
            errors = [result for result in results if isinstance(result, BaseException)]
            assert len(tasks) == 1, results
            assert all(isinstance(error, SessionBusyError) for error in errors), errors
            for error in errors:  # the busy error names the session and the task holding it
                assert isinstance(error, SessionBusyError)
                assert (error.session_id, error.task_id) == (session.id.value, tasks[0].id.value)
                assert tasks[0].id.value in str(error)
            started += 1
            assert isinstance(await tasks[0].await_outcome(), Completed)
        assert boundary.overlaps == 0
        assert len(boundary.calls()) == started


async def test_duplicate_delivery_of_a_running_task_never_starts_a_second_run(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        boundary.hold()
        task = await session.start_task(_request("duplicate-delivery"))
        await wait_for(lambda: boundary.calls_for(task.id.value))
        claims = ClaimCounts(sync_redis, settings.namespace)
        runtime = harness._open()
        await runtime.publisher.publish(task.id.value)  # the same message, delivered again
        # The claim looked at the copy while the first run held the session, and dropped it.
        since = await claims.consumed(ClaimResult.BUSY, 1, "the duplicate of a running task")
        assert since[ClaimResult.CLAIMED] == 0, since
        boundary.release()
        assert isinstance(await task.await_outcome(), Completed)
        assert len(boundary.calls_for(task.id.value)) == 1
        assert boundary.overlaps == 0


def _stale_run_ended(caplog: pytest.LogCaptureFixture, task_id: str) -> bool:
    """The worker's run of ``task_id`` logged its last step: it found its lease taken
    over (before its outcome, or when its settle was refused) and wrote nothing more."""
    return any(
        task_id in message
        and ("its outcome is left to the new holder" in message or "settle refused" in message)
        for message in (record.getMessage() for record in list(caplog.records))
    )


async def test_worker_whose_lease_was_taken_over_cannot_write_event_checkpoint_or_outcome(
    settings: Settings,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys = Keys(settings.namespace)
    # The in-process workers log at ERROR; their run's warnings are the proof it ended.
    caplog.set_level(logging.WARNING, logger="workers.runner")
    caplog.set_level(logging.WARNING, logger="workers.settling")
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        boundary.hold()
        task = await session.start_task(_request("fenced-write"))
        await wait_for(lambda: boundary.calls_for(task.id.value))
        # Another holder takes the session over with a higher fence.
        fence = sync_redis.incr(keys.fence(session.id.value))
        intruder = f"{fence}:intruder"
        sync_redis.set(keys.lease(session.id.value), intruder, px=60_000)
        boundary.release()
        await wait_for(lambda: boundary.in_flight() == 0)
        try:
            await wait_for(
                lambda: (
                    _stale_run_ended(caplog, task.id.value)
                    # or the fence failed and the stale run settled: shown below
                    or "terminal" in event_kinds(sync_redis, keys.namespace, task.id.value)
                )
            )
        except TimeoutError:
            raise AssertionError("the stale run never reached its end") from None
        assert event_kinds(sync_redis, keys.namespace, task.id.value) == ["started"]
        record = sync_redis.hgetall(keys.task(task.id.value))
        assert record[TaskField.STATE] == "running"  # type: ignore[index]
        assert TaskField.OUTCOME not in record  # type: ignore[operator]
        saver = AsyncRedisSaver(redis_url=settings.redis_url)
        await saver.asetup()
        stored = await saver.aget_tuple({"configurable": {"thread_id": session.id.value}})
        # Runs persist their checkpoint when the graph exits; the stale run's is refused.
        texts = (
            []
            if stored is None
            else [message.text for message in stored.checkpoint["channel_values"]["messages"]]
        )
        assert "native-result" not in texts
        # The new holder settles the task; the stale run's outcome never lands.
        store = RecordStore(harness._open().redis, keys)
        taken_over = Unresolved(task.id, UnresolvedReason.OBSERVATION_LOST, "lease taken over")
        await store.settle(
            session.id.value,
            task.id.value,
            TaskState.UNRESOLVED.value,
            outcome_to_json(taken_over),
            lease=intruder,
            run_ended=True,
        )
        assert isinstance(await task.await_outcome(), Unresolved)


async def test_task_cancelled_while_queued_never_reaches_the_model(
    settings: Settings,
    idle_queue_settings: Settings,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
) -> None:
    async with CeleryHarness(idle_queue_settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(_request("cancelled-while-queued"))
        idle_list = Keys.broker_queue_lists(idle_queue_settings.queue)[1]  # START_PRIORITY
        assert sync_redis.llen(idle_list) == 1
        await task.request_cancellation()
        outcome = await task.await_outcome()
        assert isinstance(outcome, Cancelled)
        assert outcome.usage == AgentUsage.ZERO
        assert task.state is TaskState.CANCELLED
        # Now a worker gets the message (moved onto the queue the test worker consumes):
        # it must drop it without running it.
        claims = ClaimCounts(sync_redis, settings.namespace)
        sync_redis.lmove(idle_list, settings.queue, "RIGHT", "LEFT")
        since = await claims.consumed(ClaimResult.TERMINAL, 1, "the cancelled task's message")
        assert since[ClaimResult.CLAIMED] == 0, since
        assert not boundary.calls_for(task.id.value)
        assert all("cancelled-while-queued" not in text for text in boundary.observed_text_values)
        follow_up = await session.start_task(_request("after-queued-cancel"))
        assert follow_up.state is TaskState.STARTING


async def test_every_task_has_exactly_one_terminal_event_and_it_is_last(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    async with CeleryHarness(settings, profile="confirmed") as harness:

        async def session_run(index: int) -> list[object]:
            session = await harness.create_session(SessionSpec())
            tasks = []
            for step in range(4):
                task = await session.start_task(_request(f"terminal-{index}-{step}"))
                if step == 1:
                    await task.request_cancellation()
                if step == 3:
                    await wait_for(lambda task=task: task.state is not TaskState.STARTING)
                    await task.request_cancellation()
                await task.await_outcome()
                tasks.append(task)
            return tasks

        groups = await asyncio.gather(*(session_run(index) for index in range(8)))
        for task in [task for group in groups for task in group]:
            tags = event_kinds(sync_redis, keys.namespace, task.id.value)
            assert tags.count("terminal") == 1, tags
            assert tags[-1] == "terminal"
            stored = loads(sync_redis.hget(keys.task(task.id.value), TaskField.OUTCOME))  # type: ignore[attr-defined,arg-type]
            outcome = await task.await_outcome()  # type: ignore[attr-defined]
            assert stored["task_id"] == outcome.task_id.value
            assert task.state.is_terminal  # type: ignore[attr-defined]
        assert boundary.overlaps == 0
