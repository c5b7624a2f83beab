"""The worker's checkpoint cache: reused only when no other run can have written since."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from langgraph.checkpoint.base import empty_checkpoint

from wire.keys import Keys
from wire.settings import Settings
from wire.store import RecordStore
from workers.checkpoints import FencedRedisSaver
from workers.lease import LEASE_CONFIG_KEY, SessionLease


async def _lease(settings: Settings, thread_id: str, value: str) -> SessionLease:
    """A run's lease with ``value``, also set in Redis (as a claim would)."""
    client = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
    keys = Keys(settings.namespace)
    await client.set(keys.lease(thread_id), value)
    return SessionLease(
        RecordStore(client, keys),
        thread_id,
        "cache-task",
        value,
        settings.lease_ttl,
        acquired_at=asyncio.get_running_loop().time(),
    )


async def _saver(settings: Settings) -> FencedRedisSaver:
    saver = FencedRedisSaver(redis_url=settings.redis_url)
    await saver.asetup()
    return saver


def _config(thread_id: str, lease: SessionLease) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", LEASE_CONFIG_KEY: lease}}


async def test_next_fence_of_the_same_worker_reuses_its_own_checkpoint(settings: Settings) -> None:
    thread = "cache-own"
    saver = await _saver(settings)
    first = await _lease(settings, thread, "5:worker-a")
    checkpoint = empty_checkpoint()
    await saver.aput(_config(thread, first), checkpoint, {"source": "loop", "step": 1}, {})
    # The same worker claims the next task of the session: fence 6.
    second = await _lease(settings, thread, "6:worker-a")
    cached = await saver.aget_tuple(_config(thread, second))
    assert cached is not None
    assert cached.checkpoint is checkpoint  # served from memory, not decoded from Redis


async def test_a_checkpoint_written_by_another_run_in_between_is_read_from_redis(
    settings: Settings,
) -> None:
    thread = "cache-other"
    first = await _saver(settings)
    mine = empty_checkpoint()
    lease_a = await _lease(settings, thread, "5:worker-a")
    await first.aput(_config(thread, lease_a), mine, {"source": "loop", "step": 1}, {})
    # Another worker held fence 6 and wrote a newer checkpoint.
    other = await _saver(settings)
    theirs = empty_checkpoint()
    lease_b = await _lease(settings, thread, "6:worker-b")
    await other.aput(_config(thread, lease_b), theirs, {"source": "loop", "step": 2}, {})
    # The first worker claims again with fence 7: its cached checkpoint is stale.
    lease_c = await _lease(settings, thread, "7:worker-a")
    loaded = await first.aget_tuple(_config(thread, lease_c))
    assert loaded is not None
    assert loaded.checkpoint["id"] == theirs["id"]
    assert loaded.checkpoint is not mine


async def test_the_first_fence_reads_nothing_until_it_wrote(
    settings: Settings, monkeypatch: Any
) -> None:
    """Fence 1 is a session's first claim: no run wrote its thread before, so the saver
    answers "empty" without a round trip; once this run wrote (a checkpoint, or pending
    writes it must find again on resume), it reads as usual."""
    thread = "cache-first-fence"
    saver = await _saver(settings)
    reads = 0
    upstream = FencedRedisSaver.__mro__[1].aget_tuple  # AsyncRedisSaver's

    async def counting(self: Any, config: Any) -> Any:
        nonlocal reads
        reads += 1
        return await upstream(self, config)

    monkeypatch.setattr(FencedRedisSaver.__mro__[1], "aget_tuple", counting)
    first = await _lease(settings, thread, "1:worker-a")
    assert await saver.aget_tuple(_config(thread, first)) is None
    assert reads == 0
    written = await saver.aput(
        _config(thread, first), empty_checkpoint(), {"source": "loop", "step": 1}, {}
    )
    at_written: Any = {
        "configurable": {
            **_config(thread, first)["configurable"],
            "checkpoint_id": written["configurable"]["checkpoint_id"],
        }
    }
    await saver.aput_writes(at_written, [("messages", "pending")], "task-1")
    found = await saver.aget_tuple(_config(thread, first))  # not cached: it has writes
    assert reads == 1
    assert found is not None
    assert found.pending_writes


async def test_a_later_fence_reads_what_the_first_run_wrote(settings: Settings) -> None:
    thread = "cache-after-first"
    writer = await _saver(settings)
    first = await _lease(settings, thread, "1:worker-a")
    mine = empty_checkpoint()
    await writer.aput(_config(thread, first), mine, {"source": "loop", "step": 1}, {})
    reader = await _saver(settings)  # another worker
    second = await _lease(settings, thread, "2:worker-b")
    loaded = await reader.aget_tuple(_config(thread, second))
    assert loaded is not None
    assert loaded.checkpoint["id"] == mine["id"]
