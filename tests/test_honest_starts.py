"""Honest starts, cancels and observation under Redis trouble (design invariant 9).

A start reported as failed never runs; an unconfirmed start runs at most once, only if
its message really reached the broker, and never after its session was released. Every
Redis error on a public path surfaces as the AHP error it means. Each "never runs" is
watched past the sweeper's period, after a canary proved that a sweep looked at the
start (``tests.support.sweeps``), and read from the model boundary and the task record.

These tests use the suite's Redis and in-process workers; the outage and ``maxmemory``
tests, which stop or fill a Redis of their own, are in
``tests/test_honest_starts_outages.py``.
"""

from __future__ import annotations

import asyncio
import json
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import (
    Completed,
    DiagnosticGap,
    SessionBlockedError,
    SessionSpec,
    TaskStartUnconfirmedError,
    Unresolved,
    UnresolvedReason,
)
from redis.asyncio import Redis as AsyncRedis

from harness import CeleryHarness
from harness.transport import TaskPublisher
from wire.codec import dumps
from wire.keys import Keys
from wire.redis_options import pool_options
from wire.settings import Settings
from wire.store import ClaimResult, RecordStore, StartResult

from .support.boundary import ModelBoundary
from .support.claims import ClaimCounts
from .support.honest_starts import FaultingPublisher, ran, text_request
from .support.start_control import StartBoundary
from .support.sweeps import watch_past_sweeps
from .support.waiting import wait_for


async def test_an_unconfirmed_start_that_never_reached_the_broker_never_runs(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    start = StartBoundary()
    async with CeleryHarness(
        settings, profile="confirmed", publisher_factory=start.publisher
    ) as harness:
        session = await harness.create_session(SessionSpec())
        start.lose_acceptance_acknowledgement(False)
        with pytest.raises(TaskStartUnconfirmedError) as caught:
            await session.start_task(text_request("never-reached-the-broker"))
        lost = caught.value.reference.request_id
        assert start.observed_accepted_starts() == 0

        await watch_past_sweeps(settings, boundary, sync_redis)
        assert not boundary.calls_for(lost)
        assert not ran(boundary, "never-reached-the-broker")
        record = sync_redis.hgetall(keys.task(lost))
        assert record.get("state") == "starting", record  # the caller can still read it
        assert record.get("deliveries") == "0", record
        with pytest.raises(SessionBlockedError):
            await session.start_task(text_request("must-not-resubmit"))

        # Released: the start can never run any more, and its record says so.
        await session.release()
        record = sync_redis.hgetall(keys.task(lost))
        assert record.get("state") == "cancelled", record
        await watch_past_sweeps(settings, boundary, sync_redis)
        assert not ran(boundary, "never-reached-the-broker")


async def test_an_unconfirmed_start_delivered_after_its_session_was_released_never_runs(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    side: list[FaultingPublisher] = []

    def factory(own: Settings) -> FaultingPublisher:
        side.append(FaultingPublisher(own, side_queue=True))
        return side[0]

    async with CeleryHarness(settings, profile="confirmed", publisher_factory=factory) as harness:
        session = await harness.create_session(SessionSpec())
        with pytest.raises(TaskStartUnconfirmedError) as caught:
            await session.start_task(text_request("delivered-after-release"))
        late = caught.value.reference.request_id
        await session.release()

        # The message that was in flight all along now reaches the deployment's queue.
        claims = ClaimCounts(sync_redis, settings.namespace)
        moved = 0
        for source, target in zip(
            Keys.broker_queue_lists(side[0].queue),
            Keys.broker_queue_lists(settings.queue),
            strict=True,
        ):
            while sync_redis.lmove(source, target, "RIGHT", "LEFT") is not None:
                moved += 1
        assert moved == 1
        # Consumed by the claim, which found the start settled by the release.
        since = await claims.consumed(ClaimResult.TERMINAL, 1, "the late message")
        assert since[ClaimResult.CLAIMED] == 0, since
        await watch_past_sweeps(settings, boundary, sync_redis)
        assert not boundary.calls_for(late)
        assert not ran(boundary, "delivered-after-release")
        record = sync_redis.hgetall(keys.task(late))
        assert record.get("state") == "cancelled", record


async def test_a_claim_of_a_released_sessions_task_settles_it_cancelled_without_running(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """The last guard: whatever the release knew, a worker never runs a task of a
    released session. Here the start was recorded behind the releasing handle's back
    (another process's start whose fate that handle never heard of)."""
    keys = Keys(settings.namespace)
    client = AsyncRedis.from_url(settings.redis_url, decode_responses=True, **pool_options())
    store = RecordStore(client, keys)
    publisher = TaskPublisher(settings)
    try:
        async with CeleryHarness(settings, profile="confirmed") as harness:
            session = await harness.create_session(SessionSpec())
            first = await session.start_task(text_request("served-before-release"))
            async with asyncio.timeout(30):
                assert isinstance(await first.await_outcome(), Completed)
            task_id = uuid4().hex
            result, _ = await store.start_task(
                session.id.value,
                task_id,
                dumps({"text": "claimed-after-release"}),
                queue=settings.queue,
            )
            assert result is StartResult.OK
            await session.release()
            claims = ClaimCounts(sync_redis, settings.namespace)
            await publisher.publish(task_id, session.id.value)
            since = await claims.consumed(ClaimResult.RELEASED, 1, "the released session's task")
            assert since[ClaimResult.CLAIMED] == 0, since
            await watch_past_sweeps(settings, boundary, sync_redis)
            assert not boundary.calls_for(task_id)
            assert not ran(boundary, "claimed-after-release")
            record = sync_redis.hgetall(keys.task(task_id))
            assert record.get("state") == "cancelled", record
            outcome = json.loads(record["outcome"])
            assert outcome["type"] == "cancelled", outcome
            assert outcome["usage"]["total_tokens"] == 0, outcome
    finally:
        await publisher.aclose()
        publisher.close()
        await client.aclose()


async def test_a_stream_key_of_the_wrong_type_ends_the_handle(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    boundary.hold()
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(text_request("wrongtype-stream"))
        events = keys.events(task.id.value)
        await wait_for(lambda: boundary.calls_for(task.id.value))
        sync_redis.delete(events)
        sync_redis.set(events, "not a stream")
        try:
            async with asyncio.timeout(15):
                outcome = await task.await_outcome()
        finally:
            sync_redis.delete(events)
            boundary.release()
        assert isinstance(outcome, Unresolved), outcome
        assert outcome.reason is UnresolvedReason.OBSERVATION_LOST
        assert "WRONGTYPE" in outcome.known, outcome


async def test_a_malformed_stream_entry_ends_the_handle(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    boundary.hold()
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(text_request("malformed-entry"))
        await wait_for(lambda: boundary.calls_for(task.id.value))
        sync_redis.xadd(keys.events(task.id.value), {"k": "e", "t": "delta", "d": "{not json"})
        try:
            async with asyncio.timeout(15):
                outcome = await task.await_outcome()
        finally:
            boundary.release()
        assert isinstance(outcome, Unresolved), outcome
        assert outcome.reason is UnresolvedReason.OBSERVATION_LOST


async def test_a_malformed_diagnostic_is_skipped_as_a_gap_and_the_task_goes_on(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    boundary.hold()
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(text_request("malformed-diagnostic"))
        diagnostics = task.diagnostics()
        await wait_for(lambda: boundary.calls_for(task.id.value))
        sync_redis.xadd(keys.events(task.id.value), {"k": "d", "t": "", "d": "[1]"})
        boundary.release()
        async with asyncio.timeout(30):
            outcome = await task.await_outcome()
            received = [event async for event in diagnostics]
        assert isinstance(outcome, Completed), outcome
        assert DiagnosticGap(task.id, 1) in received, received
