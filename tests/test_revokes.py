"""A caller's revokes: a burst is sent as a few broadcasts from one thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from harness.revokes import RevokeBatcher


class _Broker:
    """Records each broadcast and the thread it came from; the first one waits for a
    go-ahead, so a burst arrives while it is being sent."""

    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, ...]] = []
        self.threads: set[int] = set()
        self.go = threading.Event()
        self.fail = fail

    def broadcast(self, ids: Sequence[str]) -> None:
        self.threads.add(threading.get_ident())
        self.go.wait(10)
        self.sent.append(tuple(ids))
        if self.fail:
            raise ConnectionError("broker unreachable")


async def _first_broadcast_in_flight(
    batcher: RevokeBatcher, broker: _Broker
) -> asyncio.Future[None]:
    """Revoke ``first``; returns once its broadcast is being sent (and held)."""
    first = asyncio.ensure_future(batcher.revoke("first"))
    while not broker.threads:  # noqa: ASYNC110 (a thread sets it)
        await asyncio.sleep(0.001)
    return first


async def test_revokes_that_wait_behind_a_broadcast_join_the_next_one() -> None:
    broker = _Broker()
    batcher = RevokeBatcher(broker.broadcast)
    try:
        first = await _first_broadcast_in_flight(batcher, broker)
        burst = [asyncio.ensure_future(batcher.revoke(f"t{n}")) for n in range(200)]
        await asyncio.sleep(0.05)
        broker.go.set()
        await asyncio.gather(first, *burst)
    finally:
        batcher.close()
    assert broker.sent == [("first",), tuple(f"t{n}" for n in range(200))]
    assert len(broker.threads) == 1


async def test_a_failed_broadcast_fails_every_revoke_it_carried() -> None:
    broker = _Broker(fail=True)
    broker.go.set()
    batcher = RevokeBatcher(broker.broadcast)
    try:
        results = await asyncio.gather(
            *(batcher.revoke(f"t{n}") for n in range(5)), return_exceptions=True
        )
    finally:
        batcher.close()
    assert all(isinstance(result, ConnectionError) for result in results), results
    assert sorted(id for batch in broker.sent for id in batch) == [f"t{n}" for n in range(5)]


async def test_a_cancelled_revoke_leaves_its_batch_to_the_others() -> None:
    broker = _Broker()
    batcher = RevokeBatcher(broker.broadcast)
    try:
        first = await _first_broadcast_in_flight(batcher, broker)
        gone = asyncio.ensure_future(batcher.revoke("gone"))
        kept = asyncio.ensure_future(batcher.revoke("kept"))
        await asyncio.sleep(0.01)
        gone.cancel()
        broker.go.set()
        await asyncio.gather(first, kept)
        with pytest.raises(asyncio.CancelledError):
            await gone
    finally:
        batcher.close()
    assert broker.sent == [("first",), ("gone", "kept")]
