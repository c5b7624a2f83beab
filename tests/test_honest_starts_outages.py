"""Honest starts and cancels when Redis is stopped or full (design invariant 9).

A start reported as failed never runs; an unconfirmed start runs at most once, only if
its message really reached the broker, and never after its session was released. Every
Redis error on a public path surfaces as the AHP error it means. Each "never runs" is
watched past the sweeper's period, after a canary proved that a sweep looked at the
start (``tests.support.sweeps``), and read from the model boundary and the task record.

Each test stops or fills a Redis of its module's own (AOF, so the records survive its
restarts) served by one worker process. The tests on the suite's Redis and in-process
workers are in ``tests/test_honest_starts.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from agent_harness_protocol import (
    Cancelled,
    Completed,
    HarnessTransportError,
    SessionBlockedError,
    SessionSpec,
    TaskStartUnconfirmedError,
)

from harness import CeleryHarness
from tooling.embedded_redis import EmbeddedRedis
from tooling.worker_process import WorkerProcess
from wire.keys import Keys
from wire.redis_options import pool_options
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.deployments import append_only_redis, own_deployment
from .support.honest_starts import FaultingPublisher, ran, text_request
from .support.keyspace import namespace_keys
from .support.sweeps import watch_past_sweeps
from .support.waiting import wait_for


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
    publishers: list[FaultingPublisher] = []

    def factory(settings: Settings) -> FaultingPublisher:
        publishers.append(FaultingPublisher(settings))
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
                await refused.start_task(text_request("outage-before-script"))
            with pytest.raises(HarnessTransportError):
                await h.create_session(SessionSpec())
        finally:
            await asyncio.to_thread(own_redis.start)

        # Redis goes down after the start script: the publish is refused and so is the
        # rollback. Reported failed, so it must never run.
        publisher.before = own_redis.stop
        try:
            with pytest.raises(HarnessTransportError):
                await rolled_back.start_task(text_request("outage-before-publish"))
        finally:
            await asyncio.to_thread(own_redis.start)

        # The publish went out, then Redis went down before the start was blocked:
        # unconfirmed; it may run, at most once.
        publisher.after = own_redis.stop
        publisher.lose_acknowledgement = True
        try:
            with pytest.raises(TaskStartUnconfirmedError):
                await unconfirmed.start_task(text_request("outage-after-publish"))
        finally:
            await asyncio.to_thread(own_redis.start)
        with pytest.raises(SessionBlockedError):
            await unconfirmed.start_task(text_request("outage-must-not-resubmit"))

        await watch_past_sweeps(own_settings, own_boundary, own_client)
        assert not ran(own_boundary, "outage-before-script")
        assert not ran(own_boundary, "outage-before-publish")
        assert len(ran(own_boundary, "outage-after-publish")) <= 1
        for key in own_client.scan_iter(match=keys.task("*")):
            if str(key).endswith(":events"):
                continue
            record = own_client.hgetall(key)
            if "outage-before" in record.get("input", ""):
                assert record.get("state") != "running", record

        # Both sessions whose start failed are usable again.
        for session in (refused, rolled_back):
            task = await session.start_task(text_request("after-the-outage"))
            async with asyncio.timeout(60):
                assert isinstance(await task.await_outcome(), Completed)


@pytest.mark.processes
async def test_starts_at_maxmemory_are_refused_write_nothing_and_never_run(
    own_settings: Settings, own_client: redis.Redis, own_boundary: ModelBoundary
) -> None:
    keys = Keys(own_settings.namespace)
    publishers: list[FaultingPublisher] = []

    def factory(settings: Settings) -> FaultingPublisher:
        publishers.append(FaultingPublisher(settings))
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
                await session.start_task(text_request("maxmemory-start"))
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
            await session.start_task(text_request("maxmemory-publish"))
        assert namespace_keys(own_client, keys.namespace) == before

        await watch_past_sweeps(own_settings, own_boundary, own_client)
        assert not ran(own_boundary, "maxmemory-start")
        assert not ran(own_boundary, "maxmemory-publish")
        task = await session.start_task(text_request("after-maxmemory"))
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
        task = await session.start_task(text_request("cancel-through-outage"))
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
