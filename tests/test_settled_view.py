"""A task's terminal stream entry carries its settled record.

The API answers a start that waited for the outcome from the handle that saw the task
settle, without reading the record again; that is only right if the terminal entry says
exactly what the record says. Compared here for every way a caller can see a task
settle: completed, cancelled while running (cancel requested, claimed) and cancelled
before any worker claimed it (never claimed: read from the stream itself).
"""

from __future__ import annotations

import redis
from agent_harness_protocol import Cancelled, Completed, SessionSpec, TaskRequest, TextInput

from harness import CeleryHarness
from harness.api.models import TaskResource
from harness.info import settled_view
from harness.task import CeleryTask
from wire.keys import Keys
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.waiting import wait_for


async def _same_as_record(harness: CeleryHarness, task: CeleryTask) -> None:
    outcome = await task.await_outcome()
    view = task.settled_view
    assert view is not None
    info = await harness.task_info(task.id.value)
    assert (view.claimed_at, view.settled_at, view.cancel_requested) == (
        info.claimed_at,
        info.settled_at,
        info.cancel_requested,
    )
    built = TaskResource.settled(task, outcome, view)
    assert built is not None
    assert built == TaskResource.of(info)


async def test_a_completed_tasks_terminal_entry_says_what_its_record_says(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("settled view")))
        assert isinstance(await task.await_outcome(), Completed)
        await _same_as_record(harness, task)
        view = task.settled_view
        assert view is not None
        assert view.claimed_at is not None
        assert not view.cancel_requested


async def test_a_task_cancelled_while_running_says_so_in_its_terminal_entry(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        boundary.hold()
        task = await session.start_task(TaskRequest(TextInput("settled view, cancelled")))
        await wait_for(lambda: boundary.calls_for(task.id.value))
        await task.request_cancellation()
        assert isinstance(await task.await_outcome(), Cancelled)
        boundary.release()
        await _same_as_record(harness, task)
        view = task.settled_view
        assert view is not None
        assert view.cancel_requested
        assert view.claimed_at is not None


async def test_a_task_never_claimed_has_no_claim_time_in_its_terminal_entry(
    worker: None, idle_queue_settings: Settings, sync_redis: redis.Redis
) -> None:
    """The caller's cancel settles it and its handle takes the outcome from the script's
    reply (no view: the API reads the record); the entry itself still says it all."""
    async with CeleryHarness(idle_queue_settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("settled view, unclaimed")))
        await task.request_cancellation()
        assert isinstance(await task.await_outcome(), Cancelled)
        info = await harness.task_info(task.id.value)
    key = Keys(idle_queue_settings.namespace).events(task.id.value)
    [(_, fields)] = sync_redis.xrevrange(key, count=1)
    assert fields["t"] == "terminal"
    view = settled_view(fields)
    assert view is not None
    assert view.claimed_at is None
    assert (view.settled_at, view.cancel_requested) == (info.settled_at, True)
