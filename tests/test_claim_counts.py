"""The claim counts what it did with every run message, in the same step (``claim.lua``).

Tests that show a copy of a message was *not* run rely on these counts to know the
claim really looked at it (``tests.support.claims``); here the counts themselves are
checked: first every result of the script, on the suite's Redis, then duplicate, late
and unknown deliveries taken by the real workers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput

from harness import CeleryHarness
from wire.keys import Keys
from wire.settings import Settings
from wire.store import ClaimResult, LossPolicy, PauseResult, RecordStore

from .support.boundary import ModelBoundary
from .support.claims import ClaimCounts
from .support.records import ZERO_USAGE, loss_policy, scratch_store
from .support.waiting import wait_for


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RecordStore]:
    async with scratch_store(redis_url, "claims") as store:
        yield store


async def _started(store: RecordStore, persistent: bool = False) -> tuple[str, str]:
    """A new session with one started (unclaimed) task: ``(session id, task id)``."""
    session_id, task_id = uuid4().hex, uuid4().hex
    await store.create_session(session_id, {"persistent": "1" if persistent else "0"})
    result, _ = await store.start_task(
        session_id, task_id, json.dumps({"text": "x"}), queue="claims"
    )
    assert result.value == "ok", result
    return session_id, task_id


async def test_the_claim_counts_each_result_once_in_the_same_step(store: RecordStore) -> None:
    counts = await store.claim_counts()
    assert counts == dict.fromkeys(ClaimResult, 0)  # every result present, none seen yet
    seen: list[ClaimResult] = []

    async def claim(session_id: str, task_id: str, policy: LossPolicy | None = None) -> str:
        claimed = await store.claim(
            session_id, task_id, uuid4().hex, 60_000, policy or loss_policy()
        )
        seen.append(claimed.result)
        return claimed.lease

    # missing: no such task; and a message naming another session than the task's
    session_id, task_id = await _started(store)
    await claim(session_id, uuid4().hex)
    await claim(uuid4().hex, task_id)
    # claimed, then busy (a duplicate while the run holds the lease)
    lease = await claim(session_id, task_id)
    await claim(session_id, task_id)
    # terminal: a copy after the task settled
    await store.settle(session_id, task_id, "completed", {"usage": ZERO_USAGE}, lease=lease)
    await claim(session_id, task_id)
    # lost (the lost run may not resume) and exhausted (its deliveries are used up)
    for policy in (loss_policy(resume=False), loss_policy(max_deliveries=1)):
        session_id, task_id = await _started(store)
        await claim(session_id, task_id)
        await store.redis.delete(store.keys.lease(session_id))  # its worker died
        await claim(session_id, task_id, policy)
    # cancelled: handed back by a stopping worker, its cancellation requested meanwhile
    session_id, task_id = await _started(store)
    lease = await claim(session_id, task_id)
    assert await store.hand_back(session_id, task_id, lease)
    await store.cancel(session_id, task_id)
    await claim(session_id, task_id)
    # released: a start of a session released (closed, not persistent) before the claim,
    # and one of a session whose record is gone (forgotten whatever still ran)
    session_id, task_id = await _started(store)
    await store.release_session(session_id)
    await claim(session_id, task_id)
    session_id, task_id = await _started(store)
    await store.release_session(session_id, force=True)
    assert not await store.session_record(session_id)
    await claim(session_id, task_id)
    assert (await store.task_record(task_id))["state"] == "cancelled"
    # waiting: a copy of a task paused for its caller, not answered yet
    session_id, task_id = await _started(store)
    lease = await claim(session_id, task_id)
    paused = await store.pause(session_id, task_id, lease, "{}", [("i1", '{"kind":"approval"}')])
    assert paused is PauseResult.PAUSED
    await claim(session_id, task_id)

    expected = {
        ClaimResult.MISSING: 2,
        ClaimResult.CLAIMED: 5,
        ClaimResult.BUSY: 1,
        ClaimResult.TERMINAL: 1,
        ClaimResult.LOST: 1,
        ClaimResult.EXHAUSTED: 1,
        ClaimResult.CANCELLED: 1,
        ClaimResult.RELEASED: 2,
        ClaimResult.WAITING: 1,
    }
    assert {result: seen.count(result) for result in ClaimResult} == expected, seen
    assert await store.claim_counts() == expected
    raw = await store.redis.hgetall(store.keys.claim_counts())
    assert await store.redis.ttl(store.keys.claim_counts()) == -1  # kept, no TTL
    assert set(raw) == {result.value for result in ClaimResult}


async def test_duplicate_late_and_unknown_deliveries_are_counted_by_the_workers_claim(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """Three copies of a running task's message are dropped as busy, exactly three; a
    copy after it settled as terminal; a message naming no task as missing. The run
    itself is counted once as claimed."""
    copies = 3
    counts = ClaimCounts(sync_redis, settings.namespace)
    async with CeleryHarness(settings, profile="confirmed") as harness:
        store = RecordStore(harness._open().redis, Keys(settings.namespace))
        typed_before = await store.claim_counts()
        session = await harness.create_session(SessionSpec())
        boundary.hold()
        try:
            task = await session.start_task(TaskRequest(TextInput("counted-duplicates")))
            await wait_for(lambda: boundary.calls_for(task.id.value))
            publisher = harness._open().publisher
            for _ in range(copies):
                await publisher.publish(task.id.value, session.id.value)
            await counts.consumed(ClaimResult.BUSY, copies, "copies of a running task")
            assert boundary.in_flight() == 1  # the copies were dropped while it ran
        finally:
            boundary.release()
        assert isinstance(await task.await_outcome(), Completed)
        await publisher.publish(task.id.value, session.id.value)
        await counts.consumed(ClaimResult.TERMINAL, 1, "a copy of a settled task")
        await publisher.publish(uuid4().hex, session.id.value)
        since = await counts.consumed(ClaimResult.MISSING, 1, "a message naming no task")
        assert since == {
            **dict.fromkeys(ClaimResult, 0),
            ClaimResult.CLAIMED: 1,
            ClaimResult.BUSY: copies,
            ClaimResult.TERMINAL: 1,
            ClaimResult.MISSING: 1,
        }, since
        typed = await store.claim_counts()
        assert {result: typed[result] - typed_before[result] for result in ClaimResult} == since
        assert len(boundary.calls_for(task.id.value)) == 1
