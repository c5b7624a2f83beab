"""Bounded waiting for conditions observed in Redis or in handles."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def wait_for(condition: Callable[[], object], within: float = 30.0) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 (the condition is read from Redis)
            await asyncio.sleep(0.01)


async def until(
    condition: Callable[[], object],
    what: str = "condition",
    *,
    within: float = 30.0,
    every: float = 0.02,
) -> None:
    """Poll ``condition`` (observed in Redis, the boundary, a proxy or the process table:
    nothing to await) every ``every`` seconds; the test fails naming ``what`` if it does
    not hold within ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            while not condition():  # noqa: ASYNC110
                await asyncio.sleep(every)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def until_sync(
    condition: Callable[[], object], what: str = "condition", within: float = 30.0
) -> None:
    """:func:`until` for tests without an event loop (polls every 50 ms)."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
