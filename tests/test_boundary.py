"""The test boundary itself: each test sees only its own sessions' model calls.

A call left over from an earlier test (a late republish, a resumed run, a task its
harness left behind) must neither satisfy nor fail the next test's observations, even
when both send the very same input (the in-process and worker-process bindings of one
conformance suite do).
"""

from __future__ import annotations

import asyncio

import redis
from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput

from harness import CeleryHarness
from wire.settings import Settings

from .support.boundary import ModelBoundary


async def test_a_boundary_sees_only_its_own_sessions_calls(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    earlier = boundary
    async with CeleryHarness(
        settings, profile="confirmed", run_metadata=earlier.run_metadata
    ) as old_harness:
        old_session = await old_harness.create_session(SessionSpec())
        later = ModelBoundary(sync_redis)  # the next test's boundary opens
        try:
            async with CeleryHarness(
                settings, profile="confirmed", run_metadata=later.run_metadata
            ) as harness:
                leftover = await old_session.start_task(TaskRequest(TextInput("same-input")))
                assert isinstance(await asyncio.wait_for(leftover.await_outcome(), 30), Completed)
                session = await harness.create_session(SessionSpec())
                mine = await session.start_task(TaskRequest(TextInput("same-input")))
                assert isinstance(await asyncio.wait_for(mine.await_outcome(), 30), Completed)
                assert [call["task"] for call in later.calls()] == [mine.id.value]
                assert later.observed_contexts == ("same-input",)
                assert [call["task"] for call in earlier.calls()] == [leftover.id.value]
        finally:
            later.settle()
