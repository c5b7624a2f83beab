"""Bounded waiting for conditions observed in Redis or in handles."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def wait_for(condition: Callable[[], object], within: float = 30.0) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 (the condition is read from Redis)
            await asyncio.sleep(0.01)
