"""Malformed messages on the broker, and a broker at ``maxmemory``, with workers as OS processes.

Any client of the broker can put anything on a deployment's queue. A message Celery's
consumer cannot turn into a request used to raise inside the consumer: the worker exited,
kombu restored the message, and the next worker to take it died too (upstream
celery#4308). Now every such message is dropped (rejected without requeue), logged and
counted in ``Keys.malformed_messages``, and the workers keep serving. Likewise a worker
whose broker refuses kombu's bookkeeping at ``maxmemory`` (``noeviction``) backs off
instead of exiting, and serves again once memory is freed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput
from celery import Celery
from kombu import Connection, Exchange, Producer

from harness import CeleryHarness
from tooling.embedded_redis import EmbeddedRedis
from tooling.worker_process import WorkerProcess
from wire.celery_config import RUN_TASK, celery_config
from wire.keys import Keys
from wire.settings import Settings
from workers.guarded_transport import TRANSPORT_ALIAS, guarded_transport_options
from workers.intake import MessageIntake

from .support.boundary import ModelBoundary
from .support.waiting import until

pytestmark = pytest.mark.processes


def _own_settings(settings: Settings, redis_url: str | None = None) -> Settings:
    suffix = uuid4().hex[:6]
    update: dict[str, object] = {
        "namespace": f"{settings.namespace}-poison-{suffix}",
        "queue": f"{settings.queue}.poison.{suffix}",
        "sweep_interval": timedelta(seconds=0.25),
    }
    if redis_url is not None:
        update["redis_url"] = redis_url
    return settings.model_copy(update=update)


class RawPublisher:
    """Publishes run messages in the exact shape Celery's Redis transport carries
    (protocol 2: headers, ``[args, kwargs, embed]`` body), then spoils them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._app = Celery("poison-producer", set_as_current=False)
        self._app.conf.update(celery_config(settings))

    def good(self, task_id: str | None = None) -> tuple[dict[str, Any], Any]:
        task_id = task_id or uuid4().hex
        kwargs = {"namespace": self.settings.namespace, "task_id": task_id}
        message = self._app.amqp.as_task_v2(task_id, RUN_TASK, kwargs=kwargs)
        args, kwargs, embed = message.body
        return dict(message.headers), [list(args), kwargs, embed]

    def publish(self, headers: dict[str, Any], body: Any, *, raw: bytes | None = None) -> None:
        with Connection(self.settings.effective_broker_url) as connection:
            producer = Producer(
                connection.channel(), exchange=Exchange(""), routing_key=self.settings.queue
            )
            if raw is not None:
                producer.publish(
                    raw,
                    headers=headers,
                    content_type="application/json",
                    content_encoding="utf-8",
                )
            else:
                producer.publish(body, headers=headers, serializer="json")


def _malformed(publisher: RawPublisher) -> list[tuple[str, dict[str, Any], Any, bytes | None]]:
    """(what, headers, body, raw body) of each malformed message."""
    cases: list[tuple[str, dict[str, Any], Any, bytes | None]] = []
    for what, body in (
        ("body 5", 5),
        ("body null", None),
        ("body {}", {}),
        ('body {"x": 1}', {"x": 1}),
        ("body [1]", [1]),
        ("body [5, 5, 5]", [5, 5, 5]),
    ):
        headers, _ = publisher.good()
        cases.append((what, headers, body, None))
    headers, body = publisher.good()
    body[1] = {"namespace": 5, "task_id": ["x"], "session_id": {}}
    cases.append(("kwargs of the wrong types", headers, body, None))
    headers, body = publisher.good()
    body[1]["unexpected"] = "x"
    cases.append(("an unexpected keyword argument", headers, body, None))
    headers, body = publisher.good()
    body[1]["namespace"] = "another-deployment"
    cases.append(("another deployment's namespace", headers, body, None))
    headers, body = publisher.good()
    headers["timelimit"] = "abc"
    cases.append(("timelimit header a string", headers, body, None))
    headers, body = publisher.good()
    headers["timelimit"] = [1, 2, 3]
    cases.append(("timelimit header of three items", headers, body, None))
    headers, body = publisher.good()
    headers["eta"] = "not a date"
    cases.append(("eta header not a date", headers, body, None))
    headers, body = publisher.good()
    headers["id"] = 5
    cases.append(("id header a number", headers, body, None))
    headers, body = publisher.good()
    headers["task"] = "celery.chord_unlock"
    cases.append(("a task name this queue does not carry", headers, body, None))
    headers, body = publisher.good()
    headers["task"] = ["ahp.run_task"]
    cases.append(("task header a list", headers, body, None))
    headers, _ = publisher.good()
    cases.append(("undecodable body", headers, None, b"{not json"))
    return cases


def _pgid(pid: int) -> int:
    return os.getpgid(pid)


@pytest.fixture
def workers(settings: Settings) -> Iterator[list[WorkerProcess]]:
    own = _own_settings(settings)
    pool = [WorkerProcess(own, concurrency=2, name="poison") for _ in range(2)]
    with ThreadPoolExecutor(len(pool)) as starting:
        list(starting.map(WorkerProcess.start, pool))
    yield pool
    for worker in pool:
        worker.kill()


async def test_malformed_messages_are_dropped_and_counted_and_workers_keep_serving(
    workers: list[WorkerProcess], boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    settings = workers[0].settings
    keys = Keys(settings.namespace)
    pids = [worker.pid for worker in workers]
    publisher = RawPublisher(settings)
    cases = _malformed(publisher)
    for _, headers, body, raw in cases:
        await asyncio.to_thread(publisher.publish, headers, body, raw=raw)
    # Items that are not even kombu messages, pushed onto the queue list directly.
    envelopes = [
        "not json",
        "5",
        "null",
        "[]",
        '{"body": "x"}',
        '{"properties": 5, "body": ""}',
        '{"properties": {"delivery_tag": ["x"], "delivery_info": {}}, "body": ""}',
        '{"properties": {"delivery_tag": "t", "body_encoding": "base64"}, "body": "@@@"}',
    ]
    for envelope in envelopes:
        sync_redis.lpush(settings.queue, envelope)
    dropped = len(cases) + len(envelopes)

    def queued() -> int:
        return sum(int(sync_redis.llen(key)) for key in Keys.broker_queue_lists(settings.queue))

    def counted() -> int:
        return int(sync_redis.get(keys.malformed_messages()) or 0)

    def state() -> str:
        return (
            f"queued={queued()} counted={counted()} of {dropped}, workers running="
            f"{[worker.running for worker in workers]}\n"
            + "\n".join(worker.log_tail(15) for worker in workers)
        )

    try:
        await until(lambda: queued() == 0 and counted() >= dropped, "every message dropped")
    except AssertionError as error:
        raise AssertionError(f"{error}: {state()}") from None
    assert [worker.pid for worker in workers] == pids, state()
    assert all(worker.running for worker in workers), state()

    # A real task published after them runs on one of these very workers.
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("after-the-poison")))
        assert isinstance(await asyncio.wait_for(task.await_outcome(), 30), Completed)
    calls = boundary.calls_for(task.id.value)
    assert len(calls) == 1
    assert _pgid(int(str(calls[0]["pid"]))) in pids

    # None of them is waiting to be delivered again: not in the queue, not among the
    # unacknowledged messages kombu restores, and none was counted twice.
    ids = {repr(headers.get("id")) for _, headers, _, _ in cases}
    unacked = [json.loads(value)[0] for value in sync_redis.hvals("unacked")]  # type: ignore[union-attr]
    assert not [raw for raw in unacked if repr((raw.get("headers") or {}).get("id")) in ids]
    assert queued() == 0
    assert counted() == dropped, state()
    assert [worker.pid for worker in workers] == pids, state()


async def test_a_worker_survives_a_broker_at_maxmemory_and_serves_after_it_is_freed(
    settings: Settings,
) -> None:
    """The worker takes a message while Redis refuses writes (``maxmemory``, ``noeviction``):
    kombu's bookkeeping of the delivery fails with ``OutOfMemoryError``. The worker keeps
    running (same process), and once memory is freed the task completes on it (its
    message, lost with the refused bookkeeping, is published again by the sweeper)."""
    with EmbeddedRedis() as server:
        own = _own_settings(settings, redis_url=server.url)
        client = redis.Redis.from_url(server.url, decode_responses=True)
        boundary = ModelBoundary(client)
        worker = WorkerProcess(own, concurrency=2, name="maxmemory")
        worker.start()
        try:
            pid = worker.pid
            assert pid is not None
            async with CeleryHarness(own, profile="confirmed") as harness:
                session = await harness.create_session(SessionSpec())
                os.killpg(pid, signal.SIGSTOP)
                try:
                    task = await session.start_task(TaskRequest(TextInput("at-maxmemory")))
                    client.config_set("maxmemory-policy", "noeviction")
                    client.config_set("maxmemory", 1)
                finally:
                    os.killpg(pid, signal.SIGCONT)

                def queued() -> int:
                    return sum(int(client.llen(key)) for key in Keys.broker_queue_lists(own.queue))

                # The worker took the message (its bookkeeping was refused) ...
                await until(lambda: queued() == 0, "the message taken at maxmemory")
                # ... and stays up through a while at maxmemory.
                for _ in range(30):
                    await asyncio.sleep(0.1)
                    assert worker.running, worker.log_tail(30)
                assert boundary.calls_for(task.id.value) == []
                client.config_set("maxmemory", 0)
                outcome = await asyncio.wait_for(task.await_outcome(), 60)
                assert isinstance(outcome, Completed), worker.log_tail(30)
            assert worker.pid == pid, worker.log_tail(30)
            calls = boundary.calls_for(task.id.value)
            assert len(calls) == 1
            assert _pgid(int(str(calls[0]["pid"]))) == pid
        finally:
            worker.kill()
            client.close()


def test_an_acknowledgement_whose_connection_a_redis_restart_closed_never_ends_the_worker(
    settings: Settings,
) -> None:
    """After a Redis restart the consumer reconnects while tasks run; a task that then
    finishes acknowledges on the old channel, whose connection is gone. kombu raised
    ``AttributeError`` there and the worker exited; the guarded transport drops that
    acknowledgement (the message comes back after the visibility timeout and the claim
    finds its task settled)."""
    options = guarded_transport_options(MessageIntake(settings))
    with Connection(settings.redis_url) as plain:
        channel = plain.channel()
        qos = channel.qos
        plain.close()
        with pytest.raises(AttributeError):  # what kombu alone does
            qos.ack("a-delivery-tag")
    with Connection(
        settings.redis_url, transport=TRANSPORT_ALIAS, transport_options=options
    ) as guarded:
        channel = guarded.channel()
        qos = channel.qos
        guarded.close()
        qos.ack("a-delivery-tag")
        qos.reject("another-delivery-tag", requeue=True)
