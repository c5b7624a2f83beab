"""Records written straight through the scripts (``wire.store.RecordStore``), for tests
of the scripts themselves: a store in a namespace of its own, and the JSON a settled
outcome or a loss policy carries."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from uuid import uuid4

from redis.asyncio import Redis as AsyncRedis

from wire.codec import USAGE_FIELDS
from wire.keys import Keys
from wire.redis_options import pool_options
from wire.store import LossPolicy, RecordStore

ZERO_USAGE = dict.fromkeys(USAGE_FIELDS, 0)
"""An outcome's ``usage``, every count measured zero."""

UNRESOLVED_OUTCOME = json.dumps({"type": "unresolved", "output": None, "usage": ZERO_USAGE})


def loss_policy(*, resume: bool = True, max_deliveries: int = 3) -> LossPolicy:
    """What a claim does with a lost run: resume it (or not), up to ``max_deliveries``."""
    return LossPolicy(resume, max_deliveries, UNRESOLVED_OUTCOME, UNRESOLVED_OUTCOME)


@asynccontextmanager
async def scratch_store(redis_url: str, prefix: str) -> AsyncIterator[RecordStore]:
    """A store in a namespace of its own (``<prefix>-<random>``), emptied afterwards."""
    client = AsyncRedis.from_url(redis_url, decode_responses=True, **pool_options())
    keys = Keys(f"{prefix}-{uuid4().hex[:8]}")
    try:
        yield RecordStore(client, keys)
    finally:
        names = [key async for key in client.scan_iter(match=f"{keys.namespace}:*")]
        if names:
            await client.delete(*names)
        await client.aclose()
