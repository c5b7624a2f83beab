"""Idempotent starts: a retried request with the same key gets the task its first attempt
started; the model sees one run, observed where it runs."""

from __future__ import annotations

import pytest
import redis
from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput

from harness import BusyPolicy, CeleryHarness, IdempotencyKeyReusedError
from wire.keys import Keys
from wire.settings import Settings

from .support.boundary import ModelBoundary


def _request(text: str) -> TaskRequest:
    return TaskRequest(TextInput(text))


def _runs_of(boundary: ModelBoundary, text: str) -> int:
    return sum(1 for call in boundary.calls() if call["texts"][-1] == text)  # type: ignore[index]


async def test_a_retried_start_returns_the_same_task_and_runs_once(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:
        session = await harness.create_session(SessionSpec())
        first = await session.start_task(_request("idempotent"), idempotency_key="k-1")
        assert not first.replayed
        retry = await session.start_task(_request("idempotent"), idempotency_key="k-1")
        assert retry.replayed
        assert retry.id == first.id
        assert isinstance(await first.await_outcome(), Completed)
        # After it settled, the key still answers with it (the session is free now).
        late = await session.start_task(_request("idempotent"), idempotency_key="k-1")
        assert late.id == first.id
        assert await late.await_outcome() == await first.await_outcome()
        assert _runs_of(boundary, "idempotent") == 1
        key = Keys(settings.namespace).idempotency(session.id.value, "k-1")
        ttl = sync_redis.ttl(key)
        assert 0 < ttl <= int(settings.idempotency_retention.total_seconds())


async def test_a_key_reused_with_another_request_is_refused_and_starts_nothing(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:
        session = await harness.create_session(SessionSpec())
        first = await session.start_task(_request("original"), idempotency_key="k-2")
        await first.await_outcome()
        tasks = Keys(settings.namespace).task_prefix() + "*"
        before = set(sync_redis.scan_iter(tasks))
        with pytest.raises(IdempotencyKeyReusedError) as raised:
            await session.start_task(_request("different"), idempotency_key="k-2")
        assert raised.value.task_id == first.id.value
        with pytest.raises(IdempotencyKeyReusedError):
            await session.start_task(
                _request("original"), idempotency_key="k-2", if_busy=BusyPolicy.ENQUEUE
            )
        assert set(sync_redis.scan_iter(tasks)) == before
        assert _runs_of(boundary, "different") == 0


async def test_keys_are_scoped_to_their_session_and_validated(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:
        one = await harness.create_session(SessionSpec())
        other = await harness.create_session(SessionSpec())
        a = await one.start_task(_request("scoped"), idempotency_key="shared")
        b = await other.start_task(_request("scoped"), idempotency_key="shared")
        assert a.id != b.id
        assert not b.replayed
        await a.await_outcome()
        await b.await_outcome()
        for bad in ("", "x" * 256, "tab\tkey", "naïve"):
            with pytest.raises(ValueError, match="idempotency key"):
                await one.start_task(_request("bad key"), idempotency_key=bad)
        assert _runs_of(boundary, "bad key") == 0
