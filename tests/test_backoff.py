"""The one backoff helper every Redis-retrying loop uses."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from wire.backoff import Outage


async def test_pauses_double_up_to_the_cap_and_reset_after_a_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []

    async def record(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", record)
    outage = Outage("test", first=timedelta(milliseconds=10), cap=timedelta(milliseconds=40))
    for _ in range(5):
        await outage.back_off(RedisConnectionError("down"))
    assert pauses == [0.01, 0.02, 0.04, 0.04, 0.04]
    assert outage.failing
    assert outage.recovered()
    assert not outage.failing
    assert not outage.recovered()  # nothing to recover from any more
    await outage.back_off(RedisConnectionError("down again"))
    assert pauses[-1] == 0.01


async def test_a_window_bounds_the_outage_and_the_last_pause() -> None:
    outage = Outage(
        "test",
        first=timedelta(milliseconds=20),
        cap=timedelta(seconds=5),
        window=timedelta(milliseconds=150),
    )
    loop = asyncio.get_running_loop()
    began = loop.time()
    while not outage.exhausted():
        await outage.back_off(RedisConnectionError("down"))
    waited = loop.time() - began
    assert 0.15 <= waited < 0.5  # the last pause is cut at the window, not 5 s
    assert Outage("no window").exhausted() is False


async def test_an_outage_is_logged_once_when_it_begins_and_once_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage("consumer", first=timedelta(0), cap=timedelta(0))
    with caplog.at_level(logging.INFO, logger="wire.backoff"):
        for _ in range(3):
            await outage.back_off(RedisConnectionError("down"))
        outage.recovered()
        await outage.back_off(ValueError("not about the connection"))
    levels = [record.levelno for record in caplog.records]
    assert levels == [logging.WARNING, logging.INFO, logging.ERROR]
    assert caplog.records[-1].exc_info is not None  # a real bug keeps its traceback
