"""One stream reader per caller: every followed task stream on one connection.

The reader's own behaviour is checked against a real Redis with streams written here
(a key added while the read blocks, keys of the wrong type, several positions on one key,
a mark owed across a lost script); a harness with the in-process workers checks what a
caller sees: hundreds of followed tasks on a few connections, and a task whose stream is
not a stream ending alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any
from uuid import uuid4

import pytest
import redis
import redis.asyncio as aioredis
from agent_harness_protocol import (
    AgentTask,
    Cancelled,
    Completed,
    ObservationGap,
    SessionSpec,
    TaskEvent,
    TaskId,
    TaskRequest,
    TextInput,
    Unresolved,
    UnresolvedReason,
)

from harness import CeleryHarness
from harness.connections import client_name
from harness.stream_reader import Follower, Mark, StreamEntry, StreamReader
from harness.task import remote_cause
from wire.event_codec import DIAGNOSTIC, event_from_entry
from wire.keys import Keys
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.waiting import wait_for

FOLLOWED_TASKS = 500
CALLER_CONNECTIONS = 16


class _Log:
    """What every follower of one test received, in the order the reader handed it."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str]] = []
        self.failures: dict[str, BaseException] = {}
        self.losses: dict[str, BaseException] = {}

    def follower(self, key: str) -> Follower:
        def entries(batch: Sequence[StreamEntry]) -> None:
            self.entries += [(key, entry_id) for entry_id, _ in batch]

        def failed(error: BaseException) -> None:
            self.failures[key] = error

        def lost(seconds: float, error: BaseException) -> None:
            self.losses[key] = error

        return Follower(entries, failed, lost)

    def of(self, key: str) -> list[str]:
        return [entry_id for name, entry_id in self.entries if name == key]


class _CountingClient(aioredis.Redis):
    """A pooled client that counts the reads it woke (``CLIENT UNBLOCK`` that found the
    reader blocked)."""

    woken = 0

    async def client_unblock(self, client_id: int, error: bool = False, **kwargs: Any) -> bool:
        woke = bool(await super().client_unblock(client_id, error, **kwargs))
        if woke:
            self.woken += 1
        return woke


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[_CountingClient]:
    connection = _CountingClient.from_url(redis_url, decode_responses=True)
    yield connection
    await connection.aclose()


@pytest.fixture
async def reader(redis_url: str, client: _CountingClient) -> AsyncIterator[StreamReader]:
    spawned: set[asyncio.Task[Any]] = set()

    def spawn(work: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(work)
        spawned.add(task)
        task.add_done_callback(spawned.discard)
        return task

    name = f"test-reader-{uuid4().hex[:8]}"
    opened = StreamReader.open(redis_url, client, spawn, client_name=name)
    yield opened
    await opened.aclose()
    for task in tuple(spawned):
        task.cancel()


def _key() -> str:
    return f"reader-test:{uuid4().hex}"


async def _blocked(client: aioredis.Redis, reader: StreamReader) -> bool:
    """Whether the reader's connection is blocked in its ``XREAD``."""
    name = reader.connection.client_name
    for entry in await client.client_list():
        if entry.get("name") == name:
            return "b" in entry.get("flags", "") and entry.get("cmd") == "xread"
    return False


async def _until(condition: Callable[[], object], within: float = 10.0) -> None:
    await wait_for(condition, within)


async def _until_blocked(client: aioredis.Redis, reader: StreamReader) -> None:
    async with asyncio.timeout(10):
        while not await _blocked(client, reader):  # noqa: ASYNC110 (read from Redis)
            await asyncio.sleep(0.01)


async def test_a_key_subscribed_while_the_read_blocks_is_read_before_the_read_would_end(
    client: _CountingClient, reader: StreamReader
) -> None:
    idle, fresh = _key(), _key()
    log = _Log()
    reader.subscribe(idle, "0-0", log.follower(idle))
    await _until_blocked(client, reader)
    first = await client.xadd(fresh, {"n": "first"})
    reader.subscribe(fresh, "0-0", log.follower(fresh))

    async def later_entry_on_the_idle_key() -> str:
        # Half the block timeout: without the wake-up, this entry would end the blocked
        # read and the new key's entry would come only after it.
        await asyncio.sleep(1.0)
        return str(await client.xadd(idle, {"n": "later"}))

    later = await later_entry_on_the_idle_key()
    await _until(lambda: len(log.entries) == 2)
    assert log.entries == [(fresh, first), (idle, later)]
    assert client.woken == 1


async def test_keys_subscribed_together_wake_the_blocked_read_once(
    client: _CountingClient, reader: StreamReader
) -> None:
    idle = _key()
    log = _Log()
    reader.subscribe(idle, "0-0", log.follower(idle))
    await _until_blocked(client, reader)
    keys = [_key() for _ in range(50)]
    firsts = {key: await client.xadd(key, {"n": "1"}) for key in keys}
    for key in keys:
        reader.subscribe(key, "0-0", log.follower(key))
    await _until(lambda: len(log.entries) == len(keys), within=1.5)
    assert sorted(log.entries) == sorted(firsts.items())
    assert client.woken == 1
    assert reader.followed == len(keys) + 1


async def test_a_key_of_the_wrong_type_fails_only_its_subscriptions(
    client: _CountingClient, reader: StreamReader
) -> None:
    good, bad, other = _key(), _key(), _key()
    log = _Log()
    await client.set(bad, "not a stream")
    written = {key: [await client.xadd(key, {"n": "1"})] for key in (good, other)}
    for key in (good, bad, other):
        reader.subscribe(key, "0-0", log.follower(key))
    await _until(lambda: bad in log.failures and len(log.entries) == 2)
    assert "WRONGTYPE" in str(log.failures[bad])
    for key in (good, other):
        written[key].append(await client.xadd(key, {"n": "2"}))
    await _until(lambda: len(log.entries) == 4)
    assert {key: log.of(key) for key in (good, other)} == written
    assert list(log.failures) == [bad]
    assert not log.losses
    assert reader.followed == 2


async def test_subscriptions_of_one_key_from_different_positions_get_each_entry_once(
    client: _CountingClient, reader: StreamReader
) -> None:
    key = _key()
    ids = [str(await client.xadd(key, {"n": str(n)})) for n in range(5)]
    early, late = _Log(), _Log()
    reader.subscribe(key, "0-0", early.follower(key))
    await _until(lambda: len(early.entries) == 5)
    reader.subscribe(key, ids[1], late.follower(key))  # an earlier position than the read's
    await _until(lambda: len(late.entries) == 3)
    ids.append(str(await client.xadd(key, {"n": "5"})))
    await _until(lambda: len(early.entries) == 6 and len(late.entries) == 4)
    assert early.of(key) == ids
    assert late.of(key) == ids[2:]


async def test_an_owed_mark_rides_with_the_reads_until_it_lands_also_after_a_lost_script(
    client: _CountingClient, reader: StreamReader
) -> None:
    key, marked = _key(), _key()
    # Never loaded (as after a Redis restart): its first EVALSHA answers NOSCRIPT.
    script = client.register_script(f"-- {uuid4().hex}\nredis.call('INCR', KEYS[1]) return 1")
    runs = 0

    async def run() -> object:
        nonlocal runs
        runs += 1
        return await script(keys=[marked])

    log = _Log()
    reader.subscribe(key, "0-0", log.follower(key), Mark(script.sha, (marked,), run, "test"))
    await _until(lambda: runs == 1)
    await wait_for_value(client, marked, "1")
    for n in range(3):  # later reads do not carry the mark again
        await client.xadd(key, {"n": str(n)})
        await _until(lambda n=n: len(log.entries) == n + 1)
    assert await client.get(marked) == "1"
    assert runs == 1


async def wait_for_value(client: aioredis.Redis, key: str, value: str) -> None:
    async with asyncio.timeout(10):
        while await client.get(key) != value:  # noqa: ASYNC110 (read from Redis)
            await asyncio.sleep(0.01)


# -- a caller's handles -------------------------------------------------------------------
def _stored_events(client: redis.Redis, keys: Keys, task_id: str) -> list[TaskEvent]:
    return [
        event_from_entry(TaskId(task_id), fields["t"], fields["d"], remote_cause)
        for _, fields in client.xrange(keys.events(task_id))  # type: ignore[union-attr]
        if fields["k"] != DIAGNOSTIC
    ]


class _Followed:
    """A task and every event of its ``events()``, subscribed as it started."""

    def __init__(self, task: AgentTask) -> None:
        self.task = task
        self.received: list[TaskEvent] = []
        events = task.events()

        async def drain() -> None:
            async for event in events:
                self.received.append(event)

        self.done = asyncio.ensure_future(drain())


async def _caller_connections(monitor: aioredis.Redis) -> int:
    """This process's caller connections, as Redis lists them."""
    name = client_name()
    return sum(1 for entry in await monitor.client_list() if entry.get("name") == name)


async def test_a_caller_following_hundreds_of_tasks_holds_a_few_connections_and_every_event(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis, redis_url: str
) -> None:
    monitor = aioredis.Redis.from_url(redis_url, decode_responses=True)
    baseline = await _caller_connections(monitor)
    counts: list[int] = []
    stop = asyncio.Event()

    async def count_connections() -> None:
        while not stop.is_set():
            counts.append(await _caller_connections(monitor) - baseline)
            await asyncio.sleep(0.05)

    counting = asyncio.ensure_future(count_connections())
    try:
        async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:
            boundary.hold()

            async def start(index: int) -> _Followed:
                session = await harness.create_session(SessionSpec(), single_task=True)
                task = await session.start_task(TaskRequest(TextInput(f"followed {index}")))
                return _Followed(task)  # subscribed before the reader hands it any entry

            followed = await asyncio.gather(*(start(n) for n in range(FOLLOWED_TASKS)))
            await wait_for(lambda: harness.stream_reader.followed == FOLLOWED_TASKS)
            await asyncio.sleep(1.0)  # every task followed, a dozen held in the model
            print(f"caller connections following {FOLLOWED_TASKS} tasks: {max(counts)} at most")
            assert max(counts) <= CALLER_CONNECTIONS, max(counts)
            boundary.release()
            async with asyncio.timeout(120):
                outcomes = await asyncio.gather(*(f.task.await_outcome() for f in followed))
                await asyncio.gather(*(f.done for f in followed))
    finally:
        # Ended before its connection closes (a count read cut by the close would end it
        # with a ConnectionError nobody retrieves), by a flag: redis-py can swallow a
        # cancellation.
        stop.set()
        await asyncio.gather(counting, return_exceptions=True)
        await monitor.aclose()
    assert max(counts) <= CALLER_CONNECTIONS, max(counts)
    assert all(isinstance(outcome, Completed) for outcome in outcomes), [
        outcome for outcome in outcomes if not isinstance(outcome, Completed)
    ][:3]
    keys = Keys(settings.namespace)
    for each in followed:
        assert each.received == _stored_events(sync_redis, keys, each.task.id.value)
        assert not any(isinstance(event, ObservationGap) for event in each.received)


CANCELLED_TASKS = 300


async def test_a_caller_cancelling_hundreds_of_tasks_at_once_holds_a_few_connections(
    settings: Settings, boundary: ModelBoundary
) -> None:
    """Every cancel broadcasts a revoke; a burst of them must not open a broker
    connection per thread that sends one."""
    monitor = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
    baseline = await _caller_connections(monitor)
    counts: list[int] = []
    stop = asyncio.Event()

    async def count_connections() -> None:
        while not stop.is_set():
            counts.append(await _caller_connections(monitor) - baseline)
            await asyncio.sleep(0.02)

    counting = asyncio.ensure_future(count_connections())
    try:
        boundary.hold()
        async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:

            async def start(index: int) -> AgentTask:
                session = await harness.create_session(SessionSpec(), single_task=True)
                return await session.start_task(TaskRequest(TextInput(f"cancelled {index}")))

            tasks = await asyncio.gather(*(start(n) for n in range(CANCELLED_TASKS)))
            await asyncio.gather(*(task.request_cancellation() for task in tasks))
            async with asyncio.timeout(120):
                outcomes = await asyncio.gather(*(task.await_outcome() for task in tasks))
            await asyncio.sleep(0.1)  # one more count after the last revoke
    finally:
        boundary.release()
        # Ended before its connection closes (a count read cut by the close would end it
        # with a ConnectionError nobody retrieves), by a flag: redis-py can swallow a
        # cancellation.
        stop.set()
        await asyncio.gather(counting, return_exceptions=True)
        await monitor.aclose()
    print(f"caller connections cancelling {CANCELLED_TASKS} tasks: {max(counts)} at most")
    assert max(counts) <= CALLER_CONNECTIONS, max(counts)
    assert all(isinstance(outcome, Cancelled) for outcome in outcomes), [
        outcome for outcome in outcomes if not isinstance(outcome, Cancelled)
    ][:3]


async def test_a_task_stream_of_the_wrong_type_ends_only_its_own_handle(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    boundary.hold()
    async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:
        broken_session = await harness.create_session(SessionSpec())
        going_session = await harness.create_session(SessionSpec())
        broken = await broken_session.start_task(TaskRequest(TextInput("its stream breaks")))
        going = _Followed(await going_session.start_task(TaskRequest(TextInput("goes on"))))
        await wait_for(
            lambda: boundary.calls_for(broken.id.value) and boundary.calls_for(going.task.id.value)
        )
        stream = keys.events(broken.id.value)
        sync_redis.delete(stream)
        sync_redis.set(stream, "not a stream")
        try:
            async with asyncio.timeout(15):
                outcome = await broken.await_outcome()
        finally:
            sync_redis.delete(stream)
            boundary.release()
        assert isinstance(outcome, Unresolved), outcome
        assert outcome.reason is UnresolvedReason.OBSERVATION_LOST
        assert "WRONGTYPE" in outcome.known, outcome
        async with asyncio.timeout(30):
            assert isinstance(await going.task.await_outcome(), Completed)
            await going.done
        assert going.received == _stored_events(sync_redis, keys, going.task.id.value)
