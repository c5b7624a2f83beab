"""A run from Python (``harness.runs.start_run``): a new session and its first task as one
step; the session goes with its task, or stays with ``keep``."""

from __future__ import annotations

import asyncio

import pytest
import redis
from agent_harness_protocol import (
    Completed,
    IncompatibleRequirementError,
    SessionRequirements,
    SessionSpec,
    StructuredOutputRequirement,
    TaskRequest,
    TaskRequirements,
    TextInput,
)

from harness.errors import UnknownSessionError
from harness.runs import start_run
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.fixtures import scoped_harness
from .support.waiting import wait_for


def _named(client: redis.Redis, ident: str) -> set[str]:
    return {str(key) for key in client.scan_iter(match=f"*{ident}*", count=1000)}


async def test_a_run_completes_and_its_single_task_session_goes_with_it(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with scoped_harness(settings, boundary, "confirmed") as harness:
        run = await start_run(harness, SessionSpec(), TaskRequest(TextInput("one run")))
        outcome = await asyncio.wait_for(run.task.await_outcome(), 60)
        assert isinstance(outcome, Completed)
        assert [call["task"] for call in boundary.calls()] == [run.task.id.value]
        session_id = run.session.id.value
        await wait_for(lambda: not _named(sync_redis, f"session:{session_id}"))
        with pytest.raises(UnknownSessionError):
            await harness.session_info(session_id)
        # The task stays readable after its session went.
        info = await harness.task_info(run.task.id.value)
        assert (info.id, info.state.value) == (run.task.id.value, "completed")


async def test_a_kept_run_leaves_its_session_open_for_the_next_task(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with scoped_harness(settings, boundary, "confirmed") as harness:
        run = await start_run(harness, SessionSpec(), TaskRequest(TextInput("first")), keep=True)
        await asyncio.wait_for(run.task.await_outcome(), 60)
        second = await run.session.start_task(TaskRequest(TextInput("second")))
        assert isinstance(await asyncio.wait_for(second.await_outcome(), 60), Completed)
        info = await harness.session_info(run.session.id.value)
        assert not info.closed


async def test_a_run_the_harness_cannot_serve_writes_nothing(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    before = set(sync_redis.scan_iter(match=f"{settings.namespace}:session:*", count=1000))
    spec = SessionSpec(requirements=SessionRequirements())
    schema = StructuredOutputRequirement('{"type": "object", "properties": 3}')
    request = TaskRequest(TextInput("not servable"), TaskRequirements(schema))
    async with scoped_harness(settings, boundary, "confirmed") as harness:
        with pytest.raises(IncompatibleRequirementError):
            await start_run(harness, spec, request)
    assert set(sync_redis.scan_iter(match=f"{settings.namespace}:session:*", count=1000)) == before
    assert boundary.calls() == []
