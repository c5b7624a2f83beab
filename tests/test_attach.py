"""Handles by id from any process, and tenants.

A second ``CeleryHarness`` has its own runtime (clients, publisher, readers): what it
observes comes from Redis alone, as it would in another process or an API replica."""

from __future__ import annotations

import pytest
import redis
from agent_harness_protocol import (
    Cancelled,
    Completed,
    MessageDelta,
    SessionSpec,
    TaskEvent,
    TaskRequest,
    TextInput,
)

from harness import CeleryHarness, UnknownSessionError, UnknownTaskError
from wire.keys import Keys
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.waiting import wait_for


def _request(text: str) -> TaskRequest:
    return TaskRequest(TextInput(text))


def _shape(events: list[TaskEvent]) -> list[tuple[str, str]]:
    return [
        (type(event).__name__, event.text if isinstance(event, MessageDelta) else "")
        for event in events
    ]


async def test_a_task_attached_in_another_harness_reports_the_same_events_and_outcome(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with (
        CeleryHarness(settings, profile="slow", run_metadata=boundary.run_metadata) as first,
        CeleryHarness(settings, profile="slow") as second,
    ):
        session = await first.create_session(SessionSpec())
        boundary.hold()
        task = await session.start_task(_request("attached"))
        own_events = task.events()
        attached = await second.attach_task(task.id.value)
        assert attached.session_id == task.session_id
        their_events = attached.events()
        boundary.release()
        outcome = await task.await_outcome()
        assert await attached.await_outcome() == outcome
        assert attached.state is task.state
        mine = [event async for event in own_events]
        theirs = [event async for event in their_events]
        assert _shape(theirs) == _shape(mine)
        # The slow profile streams 20 chunks 50 ms apart: both handles saw all of them.
        assert sum(1 for event in theirs if isinstance(event, MessageDelta)) >= 20


async def test_a_task_is_attachable_after_its_session_was_released(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with (
        CeleryHarness(settings, run_metadata=boundary.run_metadata) as first,
        CeleryHarness(settings) as second,
    ):
        session = await first.create_session(SessionSpec())
        task = await session.start_task(_request("released then attached"))
        outcome = await task.await_outcome()
        await session.release()
        attached = await second.attach_task(task.id.value)
        assert await attached.await_outcome() == outcome
        with pytest.raises(UnknownSessionError):
            await second.attach_session(session.id.value)


async def test_an_attached_session_starts_tasks_and_its_release_stops_the_running_one(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with (
        CeleryHarness(settings, run_metadata=boundary.run_metadata) as first,
        CeleryHarness(settings, run_metadata=boundary.run_metadata) as second,
    ):
        session = await first.create_session(SessionSpec())
        done = await (await session.start_task(_request("before attach"))).await_outcome()
        assert isinstance(done, Completed)
        boundary.hold()
        running = await session.start_task(_request("running when attached"))
        await wait_for(lambda: boundary.in_flight() == 1)
        attached = await second.attach_session(session.id.value)
        assert attached.spec == session.spec
        await attached.release()  # stops the task another process started
        assert isinstance(await running.await_outcome(), Cancelled)
        assert not sync_redis.exists(Keys(settings.namespace).session(session.id.value))


async def test_another_tenant_is_answered_exactly_like_an_unknown_id(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:
        session = await harness.create_session(SessionSpec(), tenant="tenant-a")
        task = await session.start_task(_request("tenant a's"))
        await task.await_outcome()
        sid, tid = session.id.value, task.id.value
        for tenant in ("tenant-a", None):
            assert (await harness.session_info(sid, tenant=tenant)).tenant == "tenant-a"
            assert (await harness.task_info(tid, tenant=tenant)).tenant == "tenant-a"
        for probe in (sid, "0" * 32, "bad id\n"):
            with pytest.raises(UnknownSessionError) as raised:
                await harness.attach_session(probe, tenant="tenant-b")
            assert str(raised.value) == f"no session {probe!r}"
            with pytest.raises(UnknownSessionError):
                await harness.session_info(probe, tenant="tenant-b")
        for probe in (tid, "0" * 32, "../etc"):
            with pytest.raises(UnknownTaskError) as task_raised:
                await harness.attach_task(probe, tenant="tenant-b")
            assert str(task_raised.value) == f"no task {probe!r}"
            with pytest.raises(UnknownTaskError):
                await harness.task_info(probe, tenant="tenant-b")
        attached = await harness.attach_task(tid, tenant="tenant-a")
        assert isinstance(await attached.await_outcome(), Completed)
        with pytest.raises(ValueError, match="tenant"):
            await harness.create_session(SessionSpec(), tenant="no spaces allowed")
