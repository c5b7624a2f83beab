"""Honest starts, cancels and observation under Redis trouble (design invariant 9).

A start reported as failed never runs; an unconfirmed start runs at most once, only if
its message really reached the broker, and never after its session was released. Every
Redis error on a public path surfaces as the AHP error it means. Each "never runs" is
watched past the sweeper's period, after a canary proved that a sweep looked at the
start (``tests.support.sweeps``), and read from the model boundary and the task record.

The first tests use the suite's Redis and in-process workers; the outage and
``maxmemory`` tests stop or fill a Redis of their own (AOF, so the records survive its
restarts) served by a worker process.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import (
    Cancelled,
    Completed,
    DiagnosticGap,
    HarnessTransportError,
    SessionBlockedError,
    SessionSpec,
    TaskRequest,
    TaskStartUnconfirmedError,
    TextInput,
    Unresolved,
    UnresolvedReason,
)
from redis.asyncio import Redis as AsyncRedis

from harness import CeleryHarness
from harness.transport import PublishError, PublishFate, TaskPublisher
from tooling.embedded_redis import EmbeddedRedis
from tooling.worker_process import WorkerProcess
from wire.codec import dumps
from wire.keys import Keys
from wire.redis_options import pool_options
from wire.settings import Settings
from wire.store import ClaimResult, RecordStore, StartResult

from .support.boundary import ModelBoundary
from .support.claims import ClaimCounts
from .support.deployments import append_only_redis, own_deployment
from .support.keyspace import namespace_keys
from .support.start_control import StartBoundary
from .support.sweeps import watch_past_sweeps
from .support.waiting import wait_for


def _text(value: str) -> TaskRequest:
    return TaskRequest(TextInput(value))


def _ran(boundary: ModelBoundary, text: str) -> list[dict[str, object]]:
    """Model calls whose input held ``text`` (the work of that start reached the model)."""
    return [call for call in boundary.calls() if text in call["texts"]]  # type: ignore[operator]


class _FaultingPublisher:
    """The real publisher, with a fault injected around the next publish: ``before`` runs
    first, ``after`` once the publish returned or failed, and ``lose_acknowledgement``
    then reports its fate unknown although it went out.

    ``side_queue`` publishes every message for real to a queue no worker consumes and
    loses every acknowledgement: the message reached the broker, the harness cannot know
    it; a test later moves it into the deployment's queue (a delivery that came late)."""

    def __init__(self, settings: Settings, *, side_queue: bool = False) -> None:
        self.queue = f"{settings.queue}.late.{uuid4().hex[:6]}" if side_queue else settings.queue
        self._real = TaskPublisher(settings.model_copy(update={"queue": self.queue}))
        self._always_lose = side_queue
        self.before: Callable[[], object] | None = None
        self.after: Callable[[], object] | None = None
        self.lose_acknowledgement = False

    async def publish(
        self, task_id: str, session_id: str | None = None, queue: str | None = None
    ) -> None:
        before, after = self.before, self.after
        lose = self.lose_acknowledgement or self._always_lose
        self.before, self.after, self.lose_acknowledgement = None, None, False
        if before is not None:
            await asyncio.to_thread(before)
        try:
            await self._real.publish(task_id, session_id, queue)
        finally:
            if after is not None:
                await asyncio.to_thread(after)
        if lose:
            error = ConnectionResetError("connection reset before the acknowledgement arrived")
            raise PublishError(PublishFate.UNKNOWN, error)

    async def revoke(self, task_id: str) -> None:
        await self._real.revoke(task_id)

    async def aclose(self) -> None:
        await self._real.aclose()

    def close(self) -> None:
        self._real.close()


# -- the suite's Redis, in-process workers ---------------------------------------------------


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
            await session.start_task(_text("never-reached-the-broker"))
        lost = caught.value.reference.request_id
        assert start.observed_accepted_starts() == 0

        await watch_past_sweeps(settings, boundary, sync_redis)
        assert not boundary.calls_for(lost)
        assert not _ran(boundary, "never-reached-the-broker")
        record = sync_redis.hgetall(keys.task(lost))
        assert record.get("state") == "starting", record  # the caller can still read it
        assert record.get("deliveries") == "0", record
        with pytest.raises(SessionBlockedError):
            await session.start_task(_text("must-not-resubmit"))

        # Released: the start can never run any more, and its record says so.
        await session.release()
        record = sync_redis.hgetall(keys.task(lost))
        assert record.get("state") == "cancelled", record
        await watch_past_sweeps(settings, boundary, sync_redis)
        assert not _ran(boundary, "never-reached-the-broker")


async def test_an_unconfirmed_start_delivered_after_its_session_was_released_never_runs(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    side: list[_FaultingPublisher] = []

    def factory(own: Settings) -> _FaultingPublisher:
        side.append(_FaultingPublisher(own, side_queue=True))
        return side[0]

    async with CeleryHarness(settings, profile="confirmed", publisher_factory=factory) as harness:
        session = await harness.create_session(SessionSpec())
        with pytest.raises(TaskStartUnconfirmedError) as caught:
            await session.start_task(_text("delivered-after-release"))
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
        assert not _ran(boundary, "delivered-after-release")
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
            first = await session.start_task(_text("served-before-release"))
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
            assert not _ran(boundary, "claimed-after-release")
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
        task = await session.start_task(_text("wrongtype-stream"))
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
        task = await session.start_task(_text("malformed-entry"))
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
        task = await session.start_task(_text("malformed-diagnostic"))
        diagnostics = task.diagnostics()
        await wait_for(lambda: boundary.calls_for(task.id.value))
        sync_redis.xadd(keys.events(task.id.value), {"k": "d", "t": "", "d": "[1]"})
        boundary.release()
        async with asyncio.timeout(30):
            outcome = await task.await_outcome()
            received = [event async for event in diagnostics]
        assert isinstance(outcome, Completed), outcome
        assert DiagnosticGap(task.id, 1) in received, received


# -- a Redis of its own, stopped and filled -----------------------------------------------


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    with append_only_redis(tmp_path_factory.mktemp("honest-starts-redis")) as server:
        yield server


@pytest.fixture(scope="module")
def own_settings(own_redis: EmbeddedRedis) -> Settings:
    return own_deployment(
        own_redis.url,
        "honest",
        # Renewed every second: an outage of a second or two does not let a lease lapse.
        lease_ttl=timedelta(seconds=6),
        sweep_interval=timedelta(seconds=0.25),
    )


@pytest.fixture(scope="module")
def own_worker(own_settings: Settings) -> Iterator[WorkerProcess]:
    with WorkerProcess(own_settings, concurrency=2, name="honest") as worker:
        yield worker


@pytest.fixture
def own_client(own_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(own_redis.url, decode_responses=True, **pool_options())
    yield client
    client.close()


@pytest.fixture
def own_boundary(own_client: redis.Redis, own_worker: WorkerProcess) -> Iterator[ModelBoundary]:
    observation = ModelBoundary(own_client)
    yield observation
    observation.settle()


@pytest.mark.processes
async def test_starts_during_a_redis_outage_are_reported_and_never_run(
    own_redis: EmbeddedRedis,
    own_settings: Settings,
    own_client: redis.Redis,
    own_boundary: ModelBoundary,
) -> None:
    keys = Keys(own_settings.namespace)
    publishers: list[_FaultingPublisher] = []

    def factory(settings: Settings) -> _FaultingPublisher:
        publishers.append(_FaultingPublisher(settings))
        return publishers[-1]

    async with CeleryHarness(own_settings, profile="confirmed", publisher_factory=factory) as h:
        refused = await h.create_session(SessionSpec())
        rolled_back = await h.create_session(SessionSpec())
        unconfirmed = await h.create_session(SessionSpec())
        publisher = publishers[0]

        # Redis is down before the start script runs: nothing changed.
        await asyncio.to_thread(own_redis.stop)
        try:
            with pytest.raises(HarnessTransportError):
                await refused.start_task(_text("outage-before-script"))
            with pytest.raises(HarnessTransportError):
                await h.create_session(SessionSpec())
        finally:
            await asyncio.to_thread(own_redis.start)

        # Redis goes down after the start script: the publish is refused and so is the
        # rollback. Reported failed, so it must never run.
        publisher.before = own_redis.stop
        try:
            with pytest.raises(HarnessTransportError):
                await rolled_back.start_task(_text("outage-before-publish"))
        finally:
            await asyncio.to_thread(own_redis.start)

        # The publish went out, then Redis went down before the start was blocked:
        # unconfirmed; it may run, at most once.
        publisher.after = own_redis.stop
        publisher.lose_acknowledgement = True
        try:
            with pytest.raises(TaskStartUnconfirmedError):
                await unconfirmed.start_task(_text("outage-after-publish"))
        finally:
            await asyncio.to_thread(own_redis.start)
        with pytest.raises(SessionBlockedError):
            await unconfirmed.start_task(_text("outage-must-not-resubmit"))

        await watch_past_sweeps(own_settings, own_boundary, own_client)
        assert not _ran(own_boundary, "outage-before-script")
        assert not _ran(own_boundary, "outage-before-publish")
        assert len(_ran(own_boundary, "outage-after-publish")) <= 1
        for key in own_client.scan_iter(match=keys.task("*")):
            if str(key).endswith(":events"):
                continue
            record = own_client.hgetall(key)
            if "outage-before" in record.get("input", ""):
                assert record.get("state") != "running", record

        # Both sessions whose start failed are usable again.
        for session in (refused, rolled_back):
            task = await session.start_task(_text("after-the-outage"))
            async with asyncio.timeout(60):
                assert isinstance(await task.await_outcome(), Completed)


@pytest.mark.processes
async def test_starts_at_maxmemory_are_refused_write_nothing_and_never_run(
    own_settings: Settings, own_client: redis.Redis, own_boundary: ModelBoundary
) -> None:
    keys = Keys(own_settings.namespace)
    publishers: list[_FaultingPublisher] = []

    def factory(settings: Settings) -> _FaultingPublisher:
        publishers.append(_FaultingPublisher(settings))
        return publishers[-1]

    def fill() -> None:
        own_client.config_set("maxmemory-policy", "noeviction")
        own_client.config_set("maxmemory", "1")

    def free() -> None:
        own_client.config_set("maxmemory", "0")

    async with CeleryHarness(own_settings, profile="confirmed", publisher_factory=factory) as h:
        session = await h.create_session(SessionSpec())
        before = namespace_keys(own_client, keys.namespace)
        record_before = own_client.hgetall(keys.session(session.id.value))
        fill()
        try:
            with pytest.raises(HarnessTransportError):
                await h.create_session(SessionSpec())
            with pytest.raises(HarnessTransportError):
                await session.start_task(_text("maxmemory-start"))
        finally:
            free()
        assert namespace_keys(own_client, keys.namespace) == before
        assert own_client.hgetall(keys.session(session.id.value)) == record_before

        # The start script passes; the broker refuses the message (OOM): a definite
        # refusal, not an unknown fate.
        publisher = publishers[0]
        publisher.before = fill
        publisher.after = free
        with pytest.raises(HarnessTransportError):
            await session.start_task(_text("maxmemory-publish"))
        assert namespace_keys(own_client, keys.namespace) == before

        await watch_past_sweeps(own_settings, own_boundary, own_client)
        assert not _ran(own_boundary, "maxmemory-start")
        assert not _ran(own_boundary, "maxmemory-publish")
        task = await session.start_task(_text("after-maxmemory"))
        async with asyncio.timeout(60):
            assert isinstance(await task.await_outcome(), Completed)


@pytest.mark.processes
async def test_a_cancel_whose_write_failed_is_retried_and_recorded(
    own_redis: EmbeddedRedis,
    own_settings: Settings,
    own_client: redis.Redis,
    own_boundary: ModelBoundary,
) -> None:
    keys = Keys(own_settings.namespace)
    own_boundary.hold()
    async with CeleryHarness(own_settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(_text("cancel-through-outage"))
        await wait_for(lambda: own_boundary.calls_for(task.id.value))
        await asyncio.to_thread(own_redis.stop)
        try:
            with pytest.raises(HarnessTransportError):
                await task.request_cancellation()
        finally:
            await asyncio.to_thread(own_redis.start)
        await task.request_cancellation()
        assert own_client.hget(keys.task(task.id.value), "cancel") == "1"
        async with asyncio.timeout(60):
            outcome = await task.await_outcome()
        assert isinstance(outcome, Cancelled), outcome
