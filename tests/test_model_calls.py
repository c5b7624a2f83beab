"""The model-call registry as a pure asyncio primitive: a cancelled run ends only once its
model call has ended, and a cancellation delivered to the call itself ends the run as a
cancelled model call."""

from __future__ import annotations

import asyncio

import pytest

from workers.errors import ModelCallCancelledError
from workers.model_calls import ModelCalls


async def test_a_cancelled_run_ends_only_after_its_model_call_ended() -> None:
    calls = ModelCalls()
    ended: list[str] = []
    started = asyncio.Event()

    async def slow_to_stop() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)  # a provider call winding down
            ended.append("model")
            raise
        return "never"

    run = asyncio.create_task(calls.run("task", slow_to_stop()))
    await started.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    # Seen ended, the run left nothing running: its model call had ended first.
    assert ended == ["model"]


async def test_a_cancellation_delivered_to_the_call_ends_the_run_as_a_cancelled_call() -> None:
    calls = ModelCalls()
    started = asyncio.Event()

    async def honours() -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    run = asyncio.create_task(calls.run("task", honours()))
    await started.wait()
    assert calls.cancel("task")
    with pytest.raises(ModelCallCancelledError):
        await run


async def test_a_call_that_finishes_despite_the_delivered_cancellation_returns_its_result() -> None:
    calls = ModelCalls()
    started = asyncio.Event()

    async def finishes_anyway() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "finished"
        return "never"

    run = asyncio.create_task(calls.run("task", finishes_anyway()))
    await started.wait()
    assert calls.cancel("task")
    assert await run == "finished"
