"""The publisher never sends a message twice: Celery's and kombu's publish retry is off.

kombu's ``Producer.publish`` is the last call before bytes go to the broker; here it is
made to fail after (or before) the message went out, and the test counts how often the
publisher called it. Connecting may be retried (nothing is sent before a connection
exists); publishing may not.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from kombu import Producer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError

from harness.transport import PublishError, PublishFate, TaskPublisher
from wire.settings import Settings


@pytest.mark.parametrize(
    ("failure", "fate"),
    [
        (ConnectionResetError("reset after the message was written"), PublishFate.UNKNOWN),
        (TimeoutError("no reply from the broker"), PublishFate.UNKNOWN),
        (ConnectionRefusedError("refused"), PublishFate.NOT_DELIVERED),
        # The broker refused the write at maxmemory (noeviction): surely not delivered.
        (
            OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
            PublishFate.NOT_DELIVERED,
        ),
        (RedisConnectionError("Connection closed by server."), PublishFate.UNKNOWN),
    ],
)
async def test_a_failed_publish_is_attempted_once_and_classified(
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
    publisher = TaskPublisher(settings)
    try:
        with pytest.raises(PublishError) as caught:
            await publisher.publish("publish-once-task", "publish-once-session")
    finally:
        publisher.close()
    assert caught.value.fate is fate
    assert next(attempts) == 1


async def test_a_publish_to_a_broker_that_is_down_fails_fast_as_not_delivered(
    settings: Settings,
) -> None:
    down = settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    publisher = TaskPublisher(down)
    try:
        with pytest.raises(PublishError) as caught:
            await publisher.publish("never-sent", "never-sent-session")
    finally:
        publisher.close()
    assert caught.value.fate is PublishFate.NOT_DELIVERED
