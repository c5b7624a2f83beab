"""The publisher never sends a message twice, and the message it sends is Celery's.

On a ``redis://`` broker the publisher pushes kombu's envelope itself (one ``LPUSH`` on
the caller's loop, ``wire.run_envelope``): the test compares that envelope with the one
Celery's ``send_task`` writes, field by field. Its single command is made to fail after
(or before) it went out, and the test counts how often the publisher sent it. Other
brokers go through Celery, whose and kombu's publish retry is off: there kombu's
``Producer.publish`` is made to fail. Connecting may be retried (nothing is sent before a
connection exists); publishing may not.
"""

from __future__ import annotations

import itertools
import json
from typing import Any
from uuid import uuid4

import pytest
import redis
from kombu import Producer
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError

from harness.transport import PublishError, PublishFate, TaskPublisher
from wire.celery_config import RESUME_PRIORITY, RUN_TASK, START_PRIORITY
from wire.messages import RunMessage
from wire.run_envelope import queue_list, run_envelope
from wire.settings import Settings

FAILURES = [
    (ConnectionResetError("reset after the message was written"), PublishFate.UNKNOWN),
    (TimeoutError("no reply from the broker"), PublishFate.UNKNOWN),
    (ConnectionRefusedError("refused"), PublishFate.NOT_DELIVERED),
    # The broker refused the write at maxmemory (noeviction): surely not delivered.
    (
        OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
        PublishFate.NOT_DELIVERED,
    ),
    (RedisConnectionError("Connection closed by server."), PublishFate.UNKNOWN),
]


@pytest.mark.parametrize(("failure", "fate"), FAILURES)
async def test_a_failed_push_is_attempted_once_and_classified(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    failure: BaseException,
    fate: PublishFate,
) -> None:
    attempts = itertools.count()

    async def failing_command(self: AsyncRedis, *args: Any, **options: Any) -> Any:
        next(attempts)
        raise failure

    monkeypatch.setattr(AsyncRedis, "execute_command", failing_command)
    publisher = TaskPublisher(settings)
    try:
        with pytest.raises(PublishError) as caught:
            await publisher.publish("publish-once-task", "publish-once-session")
    finally:
        monkeypatch.undo()
        await publisher.aclose()
        publisher.close()
    assert caught.value.fate is fate
    assert next(attempts) == 1


@pytest.mark.parametrize(("failure", "fate"), FAILURES)
async def test_a_failed_celery_publish_is_attempted_once_and_classified(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    failure: BaseException,
    fate: PublishFate,
) -> None:
    attempts = itertools.count()

    def failing_publish(self: Producer, *args: Any, **kwargs: Any) -> None:
        next(attempts)
        raise failure

    monkeypatch.setattr(Producer, "publish", failing_publish)
    publisher = TaskPublisher(settings, through_celery=True)
    try:
        with pytest.raises(PublishError) as caught:
            await publisher.publish("publish-once-task", "publish-once-session")
    finally:
        publisher.close()
    assert caught.value.fate is fate
    assert next(attempts) == 1


@pytest.mark.parametrize("priority", [START_PRIORITY, RESUME_PRIORITY])
async def test_the_pushed_envelope_is_the_one_celery_writes(
    settings: Settings, sync_redis: redis.Redis, priority: int
) -> None:
    """Same list, same fields, same values, except what differs per publish anyway (the
    delivery tag) or per process (the ``origin`` header, the ``reply_to`` address)."""
    queue = f"envelope.{uuid4().hex[:8]}"
    task_id, session_id = uuid4().hex, uuid4().hex
    message = RunMessage(settings.namespace, task_id, session_id)
    celery = TaskPublisher(settings, through_celery=True)
    try:
        celery._app.send_task(
            RUN_TASK,
            kwargs=message.kwargs(),
            task_id=task_id,
            queue=queue,
            priority=priority,
            retry=False,
        )
    finally:
        celery.close()
    [(written_list, written)] = [
        (key, raw)
        for key in sync_redis.keys(f"{queue}*")
        if sync_redis.type(key) == "list"
        for raw in sync_redis.lrange(key, 0, -1)
    ]
    ours = json.loads(
        run_envelope(queue, task_id, message.kwargs(), priority, sender="s", reply_to="r")
    )
    theirs = json.loads(written)
    assert written_list == queue_list(queue, priority)
    for varying in ("delivery_tag", "reply_to"):
        assert theirs["properties"].pop(varying)
        assert ours["properties"].pop(varying)
    assert theirs["headers"].pop("origin")
    assert ours["headers"].pop("origin") == "s"
    assert ours == theirs
    sync_redis.delete(written_list)


@pytest.mark.parametrize("through_celery", [False, True])
async def test_a_publish_to_a_broker_that_is_down_fails_fast_as_not_delivered(
    settings: Settings, through_celery: bool
) -> None:
    down = settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    publisher = TaskPublisher(down, through_celery=through_celery)
    try:
        with pytest.raises(PublishError) as caught:
            await publisher.publish("never-sent", "never-sent-session")
    finally:
        await publisher.aclose()
        publisher.close()
    assert caught.value.fate is PublishFate.NOT_DELIVERED
