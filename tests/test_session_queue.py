"""The ``enqueue`` strategy: tasks queued behind a session's running task run strictly in
order, each once the one before settled; cancelled or released queued tasks never run.

Order and exclusion are observed where the model runs (the controlled model records each
call's input and counts overlapping calls of a session), and in the task records' times."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from itertools import pairwise

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
)

from harness import BusyPolicy, CeleryHarness, CelerySession, CeleryTask, SessionBusyError
from wire.keys import Keys
from wire.settings import Settings
from wire.store import RecordStore

from .support.boundary import ModelBoundary
from .support.waiting import wait_for

ENQUEUE = BusyPolicy.ENQUEUE


def _request(text: str) -> TaskRequest:
    return TaskRequest(TextInput(text))


@asynccontextmanager
async def _running(
    settings: Settings, boundary: ModelBoundary, text: str
) -> AsyncIterator[tuple[CeleryHarness, CelerySession, CeleryTask]]:
    """A harness, a session of it and its first task, whose model call is held."""
    async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:
        session = await harness.create_session(SessionSpec())
        boundary.hold()
        first = await session.start_task(_request(text))
        await wait_for(lambda: boundary.in_flight() == 1)
        yield harness, session, first


def _inputs(boundary: ModelBoundary) -> list[str]:
    return [str(call["texts"][-1]) for call in boundary.calls()]  # type: ignore[index]


async def test_queued_tasks_run_strictly_in_order_after_the_running_one(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with _running(settings, boundary, "queue-first") as (harness, session, first):
        second = await session.start_task(_request("queue-second"), if_busy=ENQUEUE)
        third = await session.start_task(_request("queue-third"), if_busy=ENQUEUE)
        assert (second.queued, third.queued, first.queued) == (True, True, False)
        assert second.state is TaskState.STARTING
        info = await harness.session_info(session.id.value)
        assert info.active_task == first.id.value
        assert info.queued_tasks == (second.id.value, third.id.value)
        # Nothing of the queued tasks reached the model while the first one runs.
        assert _inputs(boundary) == ["queue-first"]
        boundary.release()
        outcomes = [await task.await_outcome() for task in (first, second, third)]
        assert all(isinstance(outcome, Completed) for outcome in outcomes)
        assert _inputs(boundary) == ["queue-first", "queue-second", "queue-third"]
        assert boundary.overlaps == 0
        records = [await harness.task_info(task.id.value) for task in (first, second, third)]
        for before, after in pairwise(records):
            assert before.settled_at is not None
            assert after.claimed_at is not None
            assert after.claimed_at >= before.settled_at
        assert (await harness.session_info(session.id.value)).queued_tasks == ()


async def test_a_busy_session_rejects_a_second_task_by_default(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with _running(settings, boundary, "reject-first") as (_, session, first):
        keys = Keys(settings.namespace)
        before = set(sync_redis.scan_iter(f"{keys.task_prefix()}*"))
        with pytest.raises(SessionBusyError) as raised:
            await session.start_task(_request("reject-second"))
        assert raised.value.task_id == first.id.value
        assert set(sync_redis.scan_iter(f"{keys.task_prefix()}*")) == before
        boundary.release()
        assert isinstance(await first.await_outcome(), Completed)
        assert _inputs(boundary) == ["reject-first"]


async def test_a_cancelled_queued_task_never_runs_and_the_next_one_does(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with _running(settings, boundary, "cancel-q-first") as (_, session, first):
        doomed = await session.start_task(_request("cancel-q-doomed"), if_busy=ENQUEUE)
        last = await session.start_task(_request("cancel-q-last"), if_busy=ENQUEUE)
        await doomed.request_cancellation()
        outcome = await doomed.await_outcome()
        assert isinstance(outcome, Cancelled)
        assert outcome.usage == AgentUsage.ZERO  # measured: no model was called
        boundary.release()
        assert isinstance(await first.await_outcome(), Completed)
        assert isinstance(await last.await_outcome(), Completed)
        assert _inputs(boundary) == ["cancel-q-first", "cancel-q-last"]


async def test_cancelling_the_running_task_starts_the_queued_one(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with _running(settings, boundary, "cancel-r-first") as (_, session, first):
        queued = await session.start_task(_request("cancel-r-queued"), if_busy=ENQUEUE)
        await first.request_cancellation()
        assert isinstance(await first.await_outcome(), Cancelled)
        # The worker that settled the first task published the queued one: it runs
        # (held by the boundary like any call) without anybody starting it again.
        await wait_for(lambda: boundary.in_flight() == 1)
        boundary.release()
        assert isinstance(await queued.await_outcome(), Completed)
        assert _inputs(boundary) == ["cancel-r-first", "cancel-r-queued"]


async def test_releasing_a_session_cancels_its_queued_tasks_and_leaves_no_queue(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with _running(settings, boundary, "release-q-first") as (_, session, first):
        queued = [
            await session.start_task(_request(f"release-q-{n}"), if_busy=ENQUEUE) for n in range(3)
        ]
        keys = Keys(settings.namespace)
        # The release must be recorded before the first task may settle: once it settles,
        # its worker starts the next queued task (a race the release would then lose).
        releasing = asyncio.create_task(session.release())
        await wait_for(lambda: not sync_redis.exists(keys.session_queue(session.id.value)))
        boundary.release()
        await releasing
        for task in queued:
            outcome = await task.await_outcome()
            assert isinstance(outcome, Cancelled)
            assert outcome.usage == AgentUsage.ZERO
        await first.await_outcome()
        assert not sync_redis.exists(keys.session_queue(session.id.value))
        assert not sync_redis.exists(keys.session(session.id.value))
        assert [text for text in _inputs(boundary) if text.startswith("release-q-")] == [
            "release-q-first"
        ]


async def test_a_promoted_task_nobody_published_is_published_by_the_sweeper(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """The party that settles the task ahead publishes the promoted one; if it dies first
    (here: a settle by a process that never publishes), the workers' sweeper does."""
    async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:
        session = await harness.create_session(SessionSpec())
        keys = Keys(settings.namespace)
        store = RecordStore(redis.asyncio.Redis.from_url(settings.redis_url), keys)
        # A start whose message never left its (dead) caller holds the session.
        ghost = "ghost-of-a-dead-caller"
        result, _ = await store.start_task(
            session.id.value, ghost, json.dumps({"text": "never published"}), queue=settings.queue
        )
        assert result.value == "ok"
        queued = await session.start_task(_request("promoted-by-sweeper"), if_busy=ENQUEUE)
        assert queued.queued
        # The ghost is cancelled by a party that does not publish what it promotes.
        _, _, promoted = await store.cancel(session.id.value, ghost)
        assert promoted == queued.id.value
        assert sync_redis.hget(keys.task(promoted), "queued") is None
        assert isinstance(await queued.await_outcome(), Completed)
        assert _inputs(boundary) == ["promoted-by-sweeper"]
        await store.redis.aclose()
