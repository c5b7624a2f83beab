"""The start-and-stream relay: a handle's reads go out as SSE without a gap or a duplicate.

``task_events`` relays the reads of a task handle of the API process instead of reading
the task's stream a second time. The stream here is a real Redis Stream; the relayed reads
are scripted, because what is tested is how the relay joins them with its own reads:
entries before the handle's position, a relay that fell behind, a reader that stopped
before the terminal entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
import redis.asyncio as aioredis
from agent_harness_protocol import (
    AgentUsage,
    Completed,
    MessageDelta,
    MessageId,
    MessageRole,
    StopReason,
    TaskId,
    TaskStarted,
    TextOutput,
)

from harness.api.events import task_events
from harness.task import StreamEntry, StreamRead
from wire.codec import dumps, outcome_to_json
from wire.event_codec import SEMANTIC, TERMINAL_TAG, event_to_entry
from wire.keys import Keys

TASK = "relay-task"


async def _write_stream(client: aioredis.Redis, keys: Keys, deltas: int) -> list[StreamEntry]:
    """A task's whole stream: started, ``deltas`` deltas, completed."""
    task = TaskId(TASK)
    events = [TaskStarted(task)] + [
        MessageDelta(task, MessageId("m"), f"d{index}", MessageRole.ANSWER)
        for index in range(deltas)
    ]
    outcome = Completed(task, StopReason.FINISHED, TextOutput("done"), AgentUsage.UNKNOWN)
    encoded = [event_to_entry(event) for event in events]
    encoded.append((TERMINAL_TAG, dumps(outcome_to_json(outcome))))
    entries: list[StreamEntry] = []
    for tag, payload in encoded:
        fields = {"k": SEMANTIC, "t": tag, "d": payload}
        entry_id = await client.xadd(keys.events(TASK), fields)  # type: ignore[arg-type]
        entries.append((str(entry_id), fields))
    return entries


async def _relayed(reads: Sequence[StreamRead]) -> AsyncIterator[StreamRead]:
    for read in reads:
        yield read


async def _never_settled() -> bool:
    return False


async def _ids(stream: AsyncIterator[bytes]) -> list[str]:
    ids: list[str] = []
    async with asyncio.timeout(20):
        async for chunk in stream:
            ids += [
                line.removeprefix("id:").strip()
                for line in chunk.decode().splitlines()
                if line.startswith("id:")
            ]
    return ids


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    connection = aioredis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    await connection.aclose()


@pytest.fixture
def keys(request: pytest.FixtureRequest) -> Keys:
    return Keys(f"relay-{abs(hash(request.node.name)) % 10**8}")


async def test_entries_before_the_handles_position_are_read_then_the_relay_follows(
    client: aioredis.Redis, keys: Keys
) -> None:
    entries = await _write_stream(client, keys, deltas=6)
    ids = [entry_id for entry_id, _ in entries]
    # The handle had applied four entries when the relay subscribed; its next read
    # overlaps what the relay already sent (it must not repeat them).
    reads = [StreamRead(tuple(entries[2:6])), StreamRead(tuple(entries[6:]))]
    relayed = task_events(client, keys, TASK, "0-0", _never_settled, (ids[3], _relayed(reads)))
    assert await _ids(relayed) == ids


async def test_a_relay_that_fell_behind_reads_the_rest_from_the_stream(
    client: aioredis.Redis, keys: Keys
) -> None:
    entries = await _write_stream(client, keys, deltas=8)
    ids = [entry_id for entry_id, _ in entries]
    reads = [StreamRead(tuple(entries[:3])), StreamRead((), dropped=2)]
    relayed = task_events(client, keys, TASK, "0-0", _never_settled, ("0-0", _relayed(reads)))
    assert await _ids(relayed) == ids


async def test_a_reader_that_stopped_before_the_terminal_entry_is_followed_by_reading(
    client: aioredis.Redis, keys: Keys
) -> None:
    entries = await _write_stream(client, keys, deltas=4)
    ids = [entry_id for entry_id, _ in entries]
    reads = [StreamRead(tuple(entries[:2]))]
    relayed = task_events(client, keys, TASK, "0-0", _never_settled, ("0-0", _relayed(reads)))
    assert await _ids(relayed) == ids


async def test_resuming_after_an_event_relays_only_later_ones(
    client: aioredis.Redis, keys: Keys
) -> None:
    entries = await _write_stream(client, keys, deltas=4)
    ids = [entry_id for entry_id, _ in entries]
    reads = [StreamRead(tuple(entries))]
    relayed = task_events(client, keys, TASK, ids[2], _never_settled, ("0-0", _relayed(reads)))
    assert await _ids(relayed) == ids[3:]
