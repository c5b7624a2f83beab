"""The one backoff helper every Redis-retrying loop uses."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from wire.backoff import Outage, Retries


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


def test_retries_jitter_each_pause_within_its_step_and_start_over_after_a_quiet_spell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]
    monkeypatch.setattr("wire.backoff.time.monotonic", lambda: now[0])
    retries = Retries(
        first=timedelta(seconds=0.5), cap=timedelta(seconds=5), reset_after=timedelta(seconds=30)
    )
    steps = [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    pauses = []
    for _ in steps:
        now[0] += 1
        pauses.append(retries.next_pause())
    for pause, step in zip(pauses, steps, strict=True):
        assert step / 2 <= pause <= step
    now[0] += 31  # a quiet spell: the next failure is a first one again
    assert 0.25 <= retries.next_pause() <= 0.5
    retries.next_pause()
    retries.reset()
    assert 0.25 <= retries.next_pause() <= 0.5
    exact = Retries(first=timedelta(seconds=1), cap=timedelta(seconds=3), jitter=False)
    assert [exact.next_pause() for _ in range(3)] == [1.0, 2.0, 3.0]


def test_retries_are_jittered_so_processes_that_failed_together_spread_out() -> None:
    draws = {
        Retries(first=timedelta(seconds=1), cap=timedelta(seconds=1)).next_pause()
        for _ in range(20)
    }
    assert len(draws) > 1
