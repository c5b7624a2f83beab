"""Dead letters: a task failed after ``max_deliveries`` lost workers and a malformed message
dropped from the queue are listed (``GET /v1/dead-letters``, ``ahp-celery dead-letters``)
with their ids and cause, counted in ``/metrics``, seen only by their tenant (malformed
ones by the operator token only) and gone after the retention.

Workers are OS processes where they are killed or fed the malformed messages."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any
from uuid import uuid4

import httpx
import pytest
import redis
from agent_harness_protocol import Failed, SessionSpec, TaskRequest, TextInput
from celery import Celery
from kombu import Connection, Exchange, Producer
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis as AsyncRedis

from harness import CeleryHarness
from tooling.worker_process import WorkerProcess
from wire.celery_config import RUN_TASK, celery_config
from wire.dead_letters import DeadLetterKind, dead_letter_counts, read_dead_letters
from wire.keys import Keys
from wire.settings import Settings
from workers.intake import MessageIntake

from .support.api import (
    AHP_CELERY,
    api_harness,
    api_settings,
    auth,
    deployment_environment,
    in_process,
)
from .support.boundary import ModelBoundary
from .support.fault_pool import Pool, fault_settings
from .support.records import loss_policy, scratch_store
from .support.waiting import until

OPERATOR = "operator-token-0123456789abcdef"
OPERATOR_AUTH = {"Authorization": f"Bearer {OPERATOR}"}
SECRET = "BODY-SECRET-7f3a"
"""Carried by the malformed messages' bodies: it must never show in a dead letter."""


def _client(settings: Settings, boundary: ModelBoundary) -> Any:
    return in_process(api_harness(settings, boundary), api_settings(operator_token=OPERATOR))


async def _listed(client: httpx.AsyncClient, headers: dict[str, str]) -> list[dict[str, Any]]:
    response = await client.get("/v1/dead-letters", headers=headers)
    assert response.status_code == 200, response.text
    letters: list[dict[str, Any]] = response.json()["dead_letters"]
    return letters


async def _dead_letter_metric(client: httpx.AsyncClient) -> dict[str, float]:
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    return {
        sample.labels["kind"]: sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == "ahp_dead_letters_total"
    }


def _cli(settings: Settings, *args: str) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("AHP_")}
    env.update(deployment_environment(settings), COLUMNS="400", NO_COLOR="1")
    result = subprocess.run(
        [AHP_CELERY, "dead-letters", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.processes
async def test_a_task_failed_after_max_deliveries_is_listed_counted_and_its_tenants_alone(
    settings: Settings, boundary: ModelBoundary
) -> None:
    """``max_deliveries=1``: one SIGKILL of the worker running the task ends it Failed, and
    the same step records it: listed for its tenant and the operator with its ids and
    cause, not for another tenant, in the CLI listing and in the metrics counter."""
    workers = Pool(fault_settings(settings, max_deliveries=1))
    workers.start()
    try:
        deployment = workers.settings
        async with CeleryHarness(
            deployment, profile="confirmed", run_metadata=boundary.run_metadata
        ) as harness:
            session = await harness.create_session(SessionSpec(), tenant="alpha")
            boundary.hold()
            task = await session.start_task(TaskRequest(TextInput("killed-into-a-dead-letter")))
            await until(lambda: bool(boundary.calls_for(task.id.value)), "the first call")
            first = boundary.calls_for(task.id.value)[0]
            await asyncio.to_thread(workers.replace, workers.owner_of(int(str(first["pid"]))))
            outcome = await asyncio.wait_for(task.await_outcome(), 30)
            assert isinstance(outcome, Failed), outcome
            assert "max_deliveries" in outcome.message
        task_id, session_id = task.id.value, session.id.value

        async with _client(deployment, boundary) as client:
            mine = await _listed(client, auth("alpha"))
            assert len(mine) == 1, mine
            letter = mine[0]
            assert letter["kind"] == "max_deliveries"
            assert letter["task_id"] == task_id
            assert letter["session_id"] == session_id
            assert letter["message_id"] == task_id  # the Celery task id is the AHP task id
            assert letter["tenant"] == "alpha"
            assert letter["queue"] == deployment.queue
            assert "max_deliveries" in letter["cause"]
            assert "lost 1 times" in letter["cause"]
            assert await _listed(client, auth("beta")) == []  # another tenant sees nothing
            assert await _listed(client, OPERATOR_AUTH) == mine
            assert (await _dead_letter_metric(client)) == {"max_deliveries": 1, "malformed": 0}
            refused = await client.get("/v1/dead-letters")
            assert refused.status_code == 401

        lines = await asyncio.to_thread(_cli, deployment, "--json")
        listed = [json.loads(line) for line in lines.splitlines()]
        assert [(item["task_id"], item["session_id"], item["tenant"]) for item in listed] == [
            (task_id, session_id, "alpha")
        ]
        assert listed[0]["kind"] == "max_deliveries"
        table = await asyncio.to_thread(_cli, deployment)
        assert task_id in table
        assert session_id in table
        assert "max_deliveries" in table
        others = await asyncio.to_thread(_cli, deployment, "--tenant", "beta", "--json")
        assert others == ""
    finally:
        boundary.release()
        workers.stop()


@pytest.fixture
def poison_worker(settings: Settings) -> Iterator[WorkerProcess]:
    suffix = uuid4().hex[:6]
    own = settings.model_copy(
        update={
            "namespace": f"{settings.namespace}-dead-{suffix}",
            "queue": f"{settings.queue}.dead.{suffix}",
        }
    )
    worker = WorkerProcess(own, concurrency=2, name="dead-letters")
    worker.start()
    yield worker
    worker.kill()


def _publish_malformed(settings: Settings) -> str:
    """A run message's headers with a body that is no run's (it carries :data:`SECRET`);
    returns its message id."""
    app = Celery("dead-letter-producer", set_as_current=False)
    app.conf.update(celery_config(settings))
    message_id = uuid4().hex
    message = app.amqp.as_task_v2(message_id, RUN_TASK, kwargs={"namespace": settings.namespace})
    with Connection(settings.effective_broker_url) as connection:
        producer = Producer(connection.channel(), exchange=Exchange(""), routing_key=settings.queue)
        producer.publish({"secret": SECRET}, headers=dict(message.headers), serializer="json")
    return message_id


@pytest.mark.processes
async def test_malformed_messages_are_listed_for_the_operator_with_their_ids_never_their_bodies(
    poison_worker: WorkerProcess, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """A message with a run's headers and a body of no run, and an item that is not even a
    kombu message: both dropped by the worker process, recorded as ``malformed`` dead
    letters (message id where it had one, the queue, a cause) and counted; no tenant sees
    them, and nothing of their content is kept."""
    deployment = poison_worker.settings
    keys = Keys(deployment.namespace)
    message_id = await asyncio.to_thread(_publish_malformed, deployment)
    sync_redis.lpush(deployment.queue, json.dumps([SECRET]))
    await until(
        lambda: int(sync_redis.get(keys.malformed_messages()) or 0) >= 2,
        "both messages dropped",
        within=30,
    )
    async with _client(deployment, boundary) as client:
        letters = await _listed(client, OPERATOR_AUTH)
        assert sorted(letter["message_id"] or "" for letter in letters) == sorted(["", message_id])
        for letter in letters:
            assert letter["kind"] == "malformed"
            assert letter["queue"] == deployment.queue
            assert letter["tenant"] is None
            assert letter["task_id"] is None
            assert letter["session_id"] is None
            assert letter["cause"]
        with_id = next(letter for letter in letters if letter["message_id"])
        assert "body is dict" in with_id["cause"]
        assert await _listed(client, auth("alpha")) == []
        malformed = await client.get("/v1/dead-letters", params={"kind": "malformed"})
        assert malformed.status_code == 401
        assert (await _dead_letter_metric(client)) == {"max_deliveries": 0, "malformed": 2}
        raw = await client.get("/v1/dead-letters", headers=OPERATOR_AUTH)
        assert SECRET not in raw.text
    stored = sync_redis.xrange(keys.dead_letters())
    assert len(stored) == 2
    assert SECRET not in json.dumps(stored)
    lines = await asyncio.to_thread(_cli, deployment, "--json", "--kind", "malformed")
    assert sorted(json.loads(line)["message_id"] or "" for line in lines.splitlines()) == sorted(
        ["", message_id]
    )


@pytest.fixture
async def scratch(redis_url: str) -> AsyncIterator[Any]:
    async with scratch_store(redis_url, "dead") as store:
        yield store


async def test_the_claim_that_exhausts_the_deliveries_records_its_dead_letter_in_the_same_step(
    scratch: Any,
) -> None:
    """Straight through ``claim.lua``: the exhausting claim settles the task and writes its
    dead letter and count; tenant filter and pages read them back."""
    store = scratch
    expected: list[str] = []
    for tenant in ("alpha", "beta", "alpha", "alpha"):
        session_id, task_id = uuid4().hex, uuid4().hex
        await store.create_session(session_id, {"persistent": "0", "tenant": tenant})
        await store.start_task(session_id, task_id, json.dumps({"text": "x"}), queue="q")
        policy = loss_policy(max_deliveries=1)
        await store.claim(session_id, task_id, uuid4().hex, 60_000, policy)
        await store.redis.delete(store.keys.lease(session_id))  # its worker died
        claimed = await store.claim(session_id, task_id, uuid4().hex, 60_000, policy)
        assert claimed.result.value == "exhausted"
        assert (await store.task_record(task_id))["state"] == "failed"
        if tenant == "alpha":
            expected.insert(0, task_id)
    counts = await dead_letter_counts(store.redis, store.keys)
    assert counts == {DeadLetterKind.MAX_DELIVERIES: 4, DeadLetterKind.MALFORMED: 0}
    week = timedelta(days=7)
    first = await read_dead_letters(store.redis, store.keys, week, tenant="alpha", limit=2)
    assert [letter.task_id for letter in first.letters] == expected[:2]
    assert first.next_before is not None
    rest = await read_dead_letters(
        store.redis, store.keys, week, tenant="alpha", limit=2, before=first.next_before
    )
    assert [letter.task_id for letter in rest.letters] == expected[2:]
    assert rest.next_before is None
    assert all(letter.queue == "q" for letter in first.letters + rest.letters)
    assert await store.redis.pttl(store.keys.dead_letters()) > 0  # it expires


async def test_dead_letters_older_than_the_retention_are_gone(
    settings: Settings, redis_url: str
) -> None:
    """Recorded through the worker's intake with a retention of 1.5 s: an entry is listed
    while younger, not once older (also before anything trims it), trimmed from the stream
    by the next entry, and the stream itself expires with its last entry."""
    retention = timedelta(seconds=1.5)
    deployment = settings.model_copy(
        update={"namespace": f"dead-ret-{uuid4().hex[:8]}", "task_retention": retention}
    )
    keys = Keys(deployment.namespace)
    intake = MessageIntake(deployment)
    client = AsyncRedis.from_url(redis_url, decode_responses=True)
    try:

        async def listed() -> list[str | None]:
            page = await read_dead_letters(client, keys, retention)
            return [letter.message_id for letter in page.letters]

        await asyncio.to_thread(intake.count, "old", "a cause")
        assert await listed() == ["old"]
        await asyncio.sleep(1.0)
        await asyncio.to_thread(intake.count, "young", "a cause")
        assert await listed() == ["young", "old"]
        await asyncio.sleep(0.8)  # "old" is 1.8 s old, "young" 0.8 s
        assert await listed() == ["young"]
        assert await client.xlen(keys.dead_letters()) == 2  # nothing trimmed it yet
        await asyncio.to_thread(intake.count, "new", "a cause")
        assert await client.xlen(keys.dead_letters()) == 2  # "old" trimmed by the new entry
        await asyncio.sleep(1.7)
        assert await listed() == []
        assert not await client.exists(keys.dead_letters())  # expired with its last entry
        assert (await dead_letter_counts(client, keys))[DeadLetterKind.MALFORMED] == 3
    finally:
        names = [key async for key in client.scan_iter(match=f"{keys.namespace}:*")]
        if names:
            await client.delete(*names)
        await client.aclose()
