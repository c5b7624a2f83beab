"""A Redis connection lost in the middle of a graph turn (a Redis restart) is a fault the
deployment survives, not the task's failure.

Found by the soak (issue 8): a checkpoint read of a running turn failed with
``ConnectionError: Error while reading ... Connection reset by peer`` while Redis
restarted, and the task was settled ``Failed`` with that error as its cause. The test
injects the same error into the turn's checkpoint reads (the in-process worker shares
this module's classes) and judges the outcome, the events and the model's calls."""

from __future__ import annotations

from typing import Any

import pytest
from agent_harness_protocol import (
    Completed,
    Failed,
    SessionSpec,
    TaskRequest,
    TextInput,
    Warning,
    WarningKind,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from harness import CeleryHarness
from wire.settings import Settings
from workers.checkpoints import FencedRedisSaver

from .support.boundary import ModelBoundary

RESET = "Error while reading from 127.0.0.1:6379 : (104, 'Connection reset by peer')"


class _Blips:
    """Fails the next ``count`` checkpoint reads of one thread, like a Redis restart."""

    def __init__(self) -> None:
        self.thread = ""
        self.left = 0
        self.raised = 0


@pytest.fixture
def blips(monkeypatch: pytest.MonkeyPatch) -> _Blips:
    state = _Blips()
    original = FencedRedisSaver.aget_tuple

    async def failing(self: FencedRedisSaver, config: Any) -> Any:
        if state.left > 0 and config["configurable"].get("thread_id") == state.thread:
            state.left -= 1
            state.raised += 1
            raise RedisConnectionError(RESET)
        return await original(self, config)

    monkeypatch.setattr(FencedRedisSaver, "aget_tuple", failing)
    return state


async def test_a_turn_whose_redis_connection_reset_resumes_and_completes(
    settings: Settings, boundary: ModelBoundary, blips: _Blips
) -> None:
    async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:
        session = await harness.create_session(SessionSpec())
        blips.thread, blips.left = session.id.value, 1
        task = await session.start_task(TaskRequest(TextInput("through a redis blip")))
        events = task.events()
        outcome = await task.await_outcome()
        assert blips.raised == 1
        assert isinstance(outcome, Completed), outcome
        seen = [event async for event in events]
        recoverable = [e for e in seen if isinstance(e, Warning)]
        assert [w.kind for w in recoverable] == [WarningKind.RECOVERABLE]
        assert "Redis" in recoverable[0].message
        # The turn ran to its end once: one model call, with the input once in its context.
        calls = boundary.calls_for(task.id.value)
        assert len(calls) == 1
        assert list(calls[0]["texts"]).count("through a redis blip") == 1  # type: ignore[call-overload]


async def test_a_redis_that_keeps_failing_the_turn_ends_it_failed_after_bounded_retries(
    settings: Settings, boundary: ModelBoundary, blips: _Blips
) -> None:
    async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:
        session = await harness.create_session(SessionSpec())
        blips.thread, blips.left = session.id.value, 100
        task = await session.start_task(TaskRequest(TextInput("redis keeps failing")))
        outcome = await task.await_outcome()
        assert isinstance(outcome, Failed)
        assert RESET in outcome.message
        assert 1 < blips.raised < 100  # retried, and bounded
        assert boundary.calls_for(task.id.value) == []
