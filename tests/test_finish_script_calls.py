"""A run's last steps in one round trip (``RecordStore.finish``) do what the three calls
one after the other do: the last events before the terminal entry, each once, and a
settle that a repeat (its reply lost) finds done; a lease taken over refuses all three.
Observations are the records and streams in Redis, and the commands Redis received."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from uuid import uuid4

import pytest
import redis
from redis.exceptions import NoScriptError

from wire import scripts
from wire.store import ClaimResult, RecordStore, SettleResult

from .support.records import ZERO_USAGE, loss_policy, scratch_store

_POLICY = loss_policy()


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RecordStore]:
    async with scratch_store(redis_url, "finish") as store:
        yield store


async def _claimed(store: RecordStore) -> tuple[str, str, str]:
    session_id, task_id = uuid4().hex, uuid4().hex
    await store.create_session(session_id, {"persistent": "0"})
    await store.start_task(session_id, task_id, json.dumps({"text": "x"}), queue="scripts")
    claim = await store.claim(session_id, task_id, uuid4().hex, 60_000, _POLICY)
    assert claim.result is ClaimResult.CLAIMED
    for source in (scripts.APPEND, scripts.SETTLE):  # as a worker's earlier runs loaded them
        await store.redis.script_load(source)
    return session_id, task_id, claim.lease


def _completed(task_id: str) -> dict[str, object]:
    return {"type": "completed", "task_id": task_id, "output": "done", "usage": ZERO_USAGE}


_ENTRIES = (
    ("e", "delta", json.dumps({"message_id": "m", "text": "done", "role": "answer"})),
    ("e", "usage", "{}"),
)


async def _tags(store: RecordStore, task_id: str) -> list[str]:
    entries = await store.redis.xrange(store.keys.events(task_id))
    return [fields["t"] for _, fields in entries]


async def test_last_events_and_settle_land_in_order_once(store: RecordStore) -> None:
    session_id, task_id, lease = await _claimed(store)
    appended, settlement = await store.finish(
        session_id, task_id, lease, (1, _ENTRIES), None, "completed", _completed(task_id)
    )
    assert appended == 2
    assert settlement.result is SettleResult.SETTLED
    assert await _tags(store, task_id) == ["started", "delta", "usage", "terminal"]
    assert await store.redis.hget(store.keys.task(task_id), "state") == "completed"
    assert await store.redis.exists(store.keys.lease(session_id)) == 0
    # The same round trip again (its reply was lost): nothing is written twice.
    appended, settlement = await store.finish(
        session_id, task_id, lease, (1, _ENTRIES), None, "completed", _completed(task_id)
    )
    assert appended == -1  # the settle released the lease: the append is refused
    assert settlement.result is SettleResult.TERMINAL
    assert await _tags(store, task_id) == ["started", "delta", "usage", "terminal"]


async def test_a_lease_taken_over_refuses_all_of_it(store: RecordStore) -> None:
    session_id, task_id, lease = await _claimed(store)
    await store.redis.set(store.keys.lease(session_id), "99:someone-else")
    appended, settlement = await store.finish(
        session_id, task_id, lease, (1, _ENTRIES), None, "completed", _completed(task_id)
    )
    assert appended == -1
    assert settlement.result is SettleResult.STALE
    assert await _tags(store, task_id) == ["started"]
    assert await store.redis.hget(store.keys.task(task_id), "state") == "running"


async def test_it_is_one_round_trip(store: RecordStore, sync_redis: redis.Redis) -> None:
    """Redis receives the three scripts back to back on one connection (MONITOR)."""
    session_id, task_id, lease = await _claimed(store)
    with sync_redis.monitor() as monitor:
        await store.finish(
            session_id, task_id, lease, (1, _ENTRIES), None, "completed", _completed(task_id)
        )
        seen: list[tuple[str, str]] = []
        for command in monitor.listen():
            if command["command"].startswith("EVALSHA"):
                seen.append((command["client_port"], command["command"].split()[1]))
            if len(seen) == 2:
                break
    assert len({port for port, _ in seen}) == 1


async def test_scripts_lost_by_a_restarted_redis_raise_noscript(
    store: RecordStore, sync_redis: redis.Redis
) -> None:
    """After ``SCRIPT FLUSH`` (what a restart does) nothing runs and the caller hears
    NOSCRIPT: it then makes the three calls one by one, which load the scripts."""
    session_id, task_id, lease = await _claimed(store)
    sync_redis.script_flush()
    with pytest.raises(NoScriptError):
        await store.finish(
            session_id, task_id, lease, (1, _ENTRIES), None, "completed", _completed(task_id)
        )
    assert await _tags(store, task_id) == ["started"]
    assert await store.append(session_id, task_id, lease, _ENTRIES, 1) == 2
    assert (
        await store.settle(
            session_id, task_id, "completed", _completed(task_id), lease=lease, run_ended=True
        )
    ).result is SettleResult.SETTLED
