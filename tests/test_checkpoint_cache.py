"""The worker's checkpoint cache: reused only when no other run can have written since."""

from __future__ import annotations

import redis.asyncio as aioredis
from langgraph.checkpoint.base import empty_checkpoint

from wire.keys import Keys
from wire.settings import Settings
from wire.store import RecordStore
from workers.checkpoints import FencedRedisSaver, HeldLease, LeaseRegistry


async def _saver(settings: Settings, thread_id: str, lease: str) -> FencedRedisSaver:
    client = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
    keys = Keys(settings.namespace)
    await client.set(keys.lease(thread_id), lease)
    leases = LeaseRegistry(RecordStore(client, keys))
    leases.register(thread_id, HeldLease(thread_id, lease))
    saver = FencedRedisSaver(redis_url=settings.redis_url, leases=leases)
    await saver.asetup()
    return saver


def _config(thread_id: str) -> dict[str, dict[str, str]]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


async def test_next_fence_of_the_same_worker_reuses_its_own_checkpoint(settings: Settings) -> None:
    thread = "cache-own"
    saver = await _saver(settings, thread, "5:worker-a")
    checkpoint = empty_checkpoint()
    await saver.aput(_config(thread), checkpoint, {"source": "loop", "step": 1}, {})  # type: ignore[arg-type]
    # The same worker claims the next task of the session: fence 6.
    await saver._leases._store.redis.set(Keys(settings.namespace).lease(thread), "6:worker-a")
    saver._leases.register(thread, HeldLease(thread, "6:worker-a"))
    cached = await saver.aget_tuple(_config(thread))  # type: ignore[arg-type]
    assert cached is not None
    assert cached.checkpoint is checkpoint  # served from memory, not decoded from Redis


async def test_a_checkpoint_written_by_another_run_in_between_is_read_from_redis(
    settings: Settings,
) -> None:
    thread = "cache-other"
    first = await _saver(settings, thread, "5:worker-a")
    mine = empty_checkpoint()
    await first.aput(_config(thread), mine, {"source": "loop", "step": 1}, {})  # type: ignore[arg-type]
    # Another worker held fence 6 and wrote a newer checkpoint.
    other = await _saver(settings, thread, "6:worker-b")
    theirs = empty_checkpoint()
    await other.aput(_config(thread), theirs, {"source": "loop", "step": 2}, {})  # type: ignore[arg-type]
    # The first worker claims again with fence 7: its cached checkpoint is stale.
    await first._leases._store.redis.set(Keys(settings.namespace).lease(thread), "7:worker-a")
    first._leases.register(thread, HeldLease(thread, "7:worker-a"))
    loaded = await first.aget_tuple(_config(thread))  # type: ignore[arg-type]
    assert loaded is not None
    assert loaded.checkpoint["id"] == theirs["id"]
    assert loaded.checkpoint is not mine
