"""The fenced checkpoint saver at unit level (real Redis, real saver): its writes store
exactly what the upstream ``AsyncRedisSaver`` stores, each is fenced with the lease of the
run that makes it, and a worker refuses checkpoints in another Redis than its leases. The
fencing between worker processes is in ``tests/test_fencing.py``.
"""

from __future__ import annotations

import asyncio
from uuid import uuid4

import pytest
import redis
import redis.asyncio as aioredis
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata, empty_checkpoint
from langgraph.checkpoint.redis.aio import AsyncRedisSaver

from wire.keys import Keys
from wire.settings import Settings
from wire.store import RecordStore
from workers.checkpoints import FencedRedisSaver
from workers.errors import FencingUnavailableError, StaleLeaseError
from workers.lease import LEASE_CONFIG_KEY, SessionLease
from workers.runtime import WorkerRuntime


async def _run_lease(settings: Settings, thread_id: str, value: str) -> SessionLease:
    client = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
    return SessionLease(
        RecordStore(client, Keys(settings.namespace)),
        thread_id,
        f"task-of-{value}",
        value,
        settings.lease_ttl,
        acquired_at=asyncio.get_running_loop().time(),
    )


def _sample_checkpoint() -> Checkpoint:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {
        "messages": [HumanMessage("question", id="task-1"), AIMessage("answer", id="ai-1")]
    }
    checkpoint["channel_versions"] = {"messages": "00000000000000000000000000000002.0"}
    return checkpoint


def _stored(client: redis.Redis, thread_id: str) -> dict[str, object]:
    """Every key langgraph-checkpoint-redis holds for the thread, with its content
    (``checkpoint_ts`` left out: the saver stamps it with the time of the write)."""
    found: dict[str, object] = {}
    for key in sorted(client.scan_iter(match=f"*{thread_id}*")):
        if ":session:" in key:
            continue  # the session lease, not a checkpoint key
        kind = client.type(key)
        if kind == "ReJSON-RL":
            document = dict(client.json().get(key))  # type: ignore[arg-type]
            assert isinstance(document.pop("checkpoint_ts", 0.0), float | int)
            found[key] = document
        elif kind == "zset":
            found[key] = client.zrange(key, 0, -1, withscores=True)
        else:
            found[key] = client.get(key)
    return found


def _wipe(client: redis.Redis, thread_id: str) -> None:
    for key in _stored(client, thread_id):
        client.delete(key)


async def test_fenced_writes_store_exactly_what_the_upstream_saver_stores(
    settings: Settings, sync_redis: redis.Redis
) -> None:
    """``aput`` and ``aput_writes`` of the fenced saver leave the same documents, pointer and
    write registry as ``AsyncRedisSaver``'s own for the same input, so its search index
    and reads keep working."""
    thread = f"docs-{uuid4().hex[:8]}"
    upstream = AsyncRedisSaver(redis_url=settings.redis_url)
    fenced = FencedRedisSaver(redis_url=settings.redis_url)
    await upstream.asetup()
    await fenced.asetup()
    lease = await _run_lease(settings, thread, "3:docs")
    sync_redis.set(Keys(settings.namespace).lease(thread), lease.value)
    checkpoint = _sample_checkpoint()
    metadata: CheckpointMetadata = {"source": "loop", "step": 1, "parents": {}}
    parent: RunnableConfig = {
        "configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": "parent-1"}
    }
    written = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    writes = [("messages", [AIMessage("pending", id="ai-2")]), ("__error__", "boom")]

    async def store(saver: AsyncRedisSaver, extra: dict[str, object]) -> dict[str, object]:
        def configured(config: RunnableConfig) -> RunnableConfig:
            return {"configurable": {**config["configurable"], **extra}}

        result = await saver.aput(configured(parent), checkpoint, metadata, {})
        assert result["configurable"]["checkpoint_id"] == checkpoint["id"]
        written["configurable"]["checkpoint_id"] = checkpoint["id"]  # type: ignore[index]
        await saver.aput_writes(configured(written), writes, "task-1", "path-1")  # type: ignore[arg-type]
        return _stored(sync_redis, thread)

    expected = await store(upstream, {})
    _wipe(sync_redis, thread)
    sync_redis.set(Keys(settings.namespace).lease(thread), lease.value)
    actual = await store(fenced, {LEASE_CONFIG_KEY: lease})
    assert actual == expected
    assert any(key.startswith("checkpoint_write:") for key in actual)
    # The upstream reads (pointer, search index) see the fenced write.
    read = await upstream.aget_tuple({"configurable": {"thread_id": thread}})
    assert read is not None
    assert read.checkpoint["id"] == checkpoint["id"]
    assert len(read.pending_writes or []) == 2
    listed = [item async for item in upstream.alist({"configurable": {"thread_id": thread}})]
    assert [item.checkpoint["id"] for item in listed] == [checkpoint["id"]]


async def test_the_saver_fences_each_write_with_the_lease_of_the_run_that_makes_it(
    settings: Settings, sync_redis: redis.Redis
) -> None:
    """One saver (one process), two runs of one session: the earlier run's lease is no
    longer the session's. Its writes, and writes carrying no lease, are refused and leave
    nothing; the current run's land."""
    thread = f"runs-{uuid4().hex[:8]}"
    saver = FencedRedisSaver(redis_url=settings.redis_url)
    await saver.asetup()
    stale = await _run_lease(settings, thread, "5:same-worker")
    current = await _run_lease(settings, thread, "6:same-worker")
    sync_redis.set(Keys(settings.namespace).lease(thread), current.value)
    metadata: CheckpointMetadata = {"source": "loop", "step": 1, "parents": {}}

    def config(*lease: SessionLease) -> RunnableConfig:
        extra = {LEASE_CONFIG_KEY: lease[0]} if lease else {}
        return {"configurable": {"thread_id": thread, "checkpoint_ns": "", **extra}}

    for refused in (config(stale), config()):
        with pytest.raises(StaleLeaseError):
            await saver.aput(refused, _sample_checkpoint(), metadata, {})
        written: RunnableConfig = {
            "configurable": {**refused["configurable"], "checkpoint_id": "any"}
        }
        with pytest.raises(StaleLeaseError):
            await saver.aput_writes(written, [("messages", [])], "t", "")
    assert _stored(sync_redis, thread) == {}
    assert stale.lost.is_set()
    assert not current.lost.is_set()
    landed = _sample_checkpoint()
    await saver.aput(config(current), landed, metadata, {})
    pointer = sync_redis.get(f"checkpoint_latest:{thread}:__empty__")
    assert pointer is not None
    assert landed["id"] in str(pointer)


def test_a_worker_refuses_checkpoints_in_another_redis_than_the_leases(settings: Settings) -> None:
    """Fencing needs the lease and the checkpoint in one Redis (one atomic script)."""
    elsewhere = settings.model_copy(update={"checkpoint_url": "redis://127.0.0.1:9/0"})
    runtime = WorkerRuntime(elsewhere)
    with pytest.raises(FencingUnavailableError, match="AHP_CHECKPOINT_URL"):
        runtime.start()
    assert not runtime.started
