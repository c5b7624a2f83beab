"""A harness of a fault pool's deployment (``tests.support.fault_pool``), as the fault tests
open it (``tests/test_faults*.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from harness import CeleryHarness

from .fault_pool import Pool


@asynccontextmanager
async def harness_of(pool: Pool) -> AsyncIterator[CeleryHarness]:
    async with CeleryHarness(pool.settings, profile="confirmed") as harness:
        yield harness


__all__ = ["harness_of"]
