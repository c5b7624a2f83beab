"""Lost Redis connections, injected where they hurt: a worker's event append and a
caller's stream reader (on its one connection, which follows every task stream of the
process). (``test_redis_restart`` restarts a real Redis under load.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import (
    Completed,
    ObservationGap,
    SessionSpec,
    TaskEvent,
    TaskId,
    TaskRequest,
    TaskState,
    TerminalEvent,
    TextInput,
    TextOutput,
    Unresolved,
    UnresolvedReason,
)
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from harness import CeleryHarness
from harness.task import CeleryTask, remote_cause
from wire.event_codec import DIAGNOSTIC, event_from_entry
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings
from wire.store import RecordStore
from workers.event_sink import EventSink

from .support.boundary import ModelBoundary

LEASE = "7:worker-token"


class _FlakyStore:
    """A ``RecordStore`` whose appends lose their connection as scripted, per call:
    ``"before"`` (nothing reached Redis), ``"after"`` (the batch landed, the reply was
    lost), ``"takeover"`` (another run took the lease meanwhile, nothing landed)."""

    def __init__(self, store: RecordStore, session_id: str, script: Sequence[str]) -> None:
        self._store = store
        self._session_id = session_id
        self._script = list(script)
        self.redis = store.redis
        self.keys = store.keys
        self.calls = 0

    async def append(
        self,
        session_id: str,
        task_id: str,
        lease: str,
        entries: Sequence[tuple[str, str, str]],
        batch: int,
    ) -> int:
        mode = self._script[self.calls] if self.calls < len(self._script) else "ok"
        self.calls += 1
        if mode == "takeover":
            await self.redis.set(self.keys.lease(self._session_id), "8:another-worker")
        if mode in {"before", "takeover"}:
            raise RedisConnectionError("Connection closed by server.")
        written = await self._store.append(session_id, task_id, lease, entries, batch)
        if mode == "after":
            raise RedisConnectionError("Connection closed by server.")
        return written


@pytest.fixture
async def running_task(redis_url: str) -> AsyncIterator[tuple[RecordStore, str, str]]:
    """A task claimed under ``LEASE`` (its records as the claim leaves them)."""
    client = Redis.from_url(redis_url, decode_responses=True)
    keys = Keys(f"sink-{uuid4().hex[:8]}")
    session_id, task_id = uuid4().hex, uuid4().hex
    await client.hset(
        keys.task(task_id), mapping={TaskField.STATE: "running", TaskField.SESSION: session_id}
    )
    await client.set(keys.lease(session_id), LEASE, px=60_000)
    await client.xadd(keys.events(task_id), {"k": "e", "t": "started", "d": "{}"})
    yield RecordStore(client, keys), session_id, task_id
    await client.aclose()


async def _emit_in_batches(sink: EventSink, batches: Sequence[Sequence[str]]) -> None:
    for batch in batches:
        for payload in batch:
            sink.emit("e", "delta", payload)
        await asyncio.sleep(0.3)  # the flusher takes this batch (and retries) alone


async def _payloads(store: RecordStore, task_id: str) -> list[str]:
    entries = await store.redis.xrange(store.keys.events(task_id))
    return [fields["d"] for _, fields in entries]


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(["after", "before", "ok", "after"], id="lost-replies-and-refused-sends"),
        pytest.param(["before", "before", "before"], id="refused-repeatedly"),
        pytest.param(["after", "after", "after"], id="every-reply-lost"),
    ],
)
async def test_event_sink_retries_a_lost_append_exactly_once_and_in_order(
    running_task: tuple[RecordStore, str, str], script: list[str]
) -> None:
    store, session_id, task_id = running_task
    flaky = _FlakyStore(store, session_id, script)
    sink = EventSink(flaky, session_id, task_id, LEASE)  # type: ignore[arg-type]
    sink.start()
    await _emit_in_batches(sink, [["d0", "d1"], ["d2"], ["d3", "d4", "d5"]])
    sink.emit("e", "delta", "d6")
    await sink.drain()
    assert not sink.lease_lost
    assert not sink.task_settled
    assert await _payloads(store, task_id) == ["{}", "d0", "d1", "d2", "d3", "d4", "d5", "d6"]
    assert flaky.calls >= len(script)


async def test_event_sink_retry_keeps_the_fence_check(
    running_task: tuple[RecordStore, str, str],
) -> None:
    store, session_id, task_id = running_task
    flaky = _FlakyStore(store, session_id, ["ok", "takeover"])
    sink = EventSink(flaky, session_id, task_id, LEASE)  # type: ignore[arg-type]
    sink.start()
    await _emit_in_batches(sink, [["d0"], ["d1", "d2"]])
    sink.emit("e", "delta", "d3")
    await sink.drain()
    # The retry after the lost connection is refused: the lease is another run's now.
    assert sink.lease_lost
    assert await _payloads(store, task_id) == ["{}", "d0"]


def _stored_events(client: redis.Redis, keys: Keys, task_id: str) -> list[TaskEvent]:
    return [
        event_from_entry(TaskId(task_id), fields["t"], fields["d"], remote_cause)
        for _, fields in client.xrange(keys.events(task_id))  # type: ignore[union-attr]
        if fields["k"] != DIAGNOSTIC
    ]


async def test_reader_resumes_after_lost_connections_without_gap_or_duplicate(
    settings: Settings,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with CeleryHarness(settings, profile="streaming") as harness:
        connection = harness.stream_reader.connection
        real_send = connection.send_packed_command
        reads = 0

        async def every_other_read_fails(command: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal reads
            if any(b"XREAD" in part for part in command):  # a read, not the handshake
                reads += 1
                if reads % 2:
                    raise RedisConnectionError("Connection closed by server.")
            return await real_send(command, *args, **kwargs)

        monkeypatch.setattr(connection, "send_packed_command", every_other_read_fails)
        session = await harness.create_session(SessionSpec())
        boundary.hold()
        task = await session.start_task(TaskRequest(TextInput("reconnecting reader")))
        events = task.events()
        received: list[TaskEvent] = []

        async def drain() -> None:
            async for event in events:
                received.append(event)

        draining = asyncio.ensure_future(drain())
        while task.state is TaskState.STARTING:  # noqa: ASYNC110 (the reader sets it)
            await asyncio.sleep(0.01)
        boundary.release()
        assert isinstance(await task.await_outcome(), Completed)
        await draining
    assert reads >= 10  # failures between reads of the streamed entries
    stored = _stored_events(sync_redis, Keys(settings.namespace), task.id.value)
    assert received == stored  # 41 deltas and the rest: each once, in order
    assert not any(isinstance(event, ObservationGap) for event in received)


async def test_reader_ends_with_observation_lost_when_redis_stays_unreachable(
    settings: Settings, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    unserved = settings.model_copy(update={"queue": settings.queue + ".unserved"})
    monkeypatch.setattr(CeleryTask, "reconnect_window", 0.5)
    async with CeleryHarness(unserved, profile="confirmed") as harness:
        runtime = harness._open()
        connection = harness.stream_reader.connection
        real_send = connection.send_packed_command

        async def unreachable(*args: Any, **kwargs: Any) -> Any:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1. Connection refused.")

        session = await harness.create_session(SessionSpec())
        monkeypatch.setattr(connection, "send_packed_command", unreachable)
        task = await session.start_task(TaskRequest(TextInput("never observed")))
        events = task.events()
        outcome = await asyncio.wait_for(task.await_outcome(), 10)
        assert isinstance(outcome, Unresolved)
        assert outcome.reason is UnresolvedReason.OBSERVATION_LOST
        assert task.state is TaskState.UNRESOLVED
        received = [event async for event in events]
        assert len(received) == 1
        assert isinstance(received[0], TerminalEvent)
        assert received[0].outcome == outcome
        monkeypatch.setattr(connection, "send_packed_command", real_send)
        await runtime.redis.delete(unserved.queue)


async def test_observation_lost_keeps_the_partial_answer_the_handle_saw(
    settings: Settings, boundary: ModelBoundary, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handle's local ``Unresolved(OBSERVATION_LOST)`` keeps the answer text it had
    already observed as incomplete output, as every other unresolved outcome does."""
    monkeypatch.setattr(CeleryTask, "reconnect_window", 0.5)
    async with CeleryHarness(
        settings, profile="outcome", run_metadata=boundary.run_metadata
    ) as harness:
        connection = harness.stream_reader.connection
        real_send = connection.send_packed_command

        async def unreachable(*args: Any, **kwargs: Any) -> Any:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1. Connection refused.")

        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("observed then lost")))
        boundary.script_scope({"op": "delta", "text": "seen-before-the-loss"})
        async for event in task.events():
            if getattr(event, "text", "") == "seen-before-the-loss":
                break
        monkeypatch.setattr(connection, "send_packed_command", unreachable)
        outcome = await asyncio.wait_for(task.await_outcome(), 10)
        monkeypatch.setattr(connection, "send_packed_command", real_send)
        assert isinstance(outcome, Unresolved)
        assert outcome.reason is UnresolvedReason.OBSERVATION_LOST
        assert outcome.output == TextOutput("seen-before-the-loss", complete=False)
        boundary.script_scope({"op": "complete", "text": ""})
