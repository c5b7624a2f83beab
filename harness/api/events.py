"""A task's events as Server-Sent Events, resumable from any event id.

The durable log is the task's Redis Stream (``Keys.events``); each SSE event's ``id`` is
its stream entry id. A client that reconnects with ``Last-Event-ID`` continues with the
entry right after it: nothing is skipped and nothing repeats, for as long as the stream is
retained (``AHP_TASK_RETENTION`` after the task settled). The stream ends after the
terminal event (``task_completed``, ``task_failed``, ``task_cancelled`` or
``task_unresolved``), whose data carries the outcome. A stream that ends without one
(the server stopped, Redis failed) is resumed by reconnecting with ``Last-Event-ID``.

Event names and data (every ``data`` is a JSON object with ``task_id``):
``task_started``; ``message_delta`` and ``message_completed`` (``message_id``, ``text``,
``role``); ``usage_changed`` (``task``, ``session`` usage); ``tool_call_changed``
(``work_id``, ``name``, ``status``, ``arguments``, ``result``, ``error``); ``warning``
(``kind``, ``message``); ``diagnostic`` (``provider``, ``name``, ``payload``, recorded
only for sessions that require diagnostics); ``observation_gap`` (``dropped_events``: an
entry that could not be decoded); and the terminal events (``outcome``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, cast

from agent_harness_protocol import (
    EffectChanged,
    HarnessTransportError,
    InteractionRequested,
    InteractionResolved,
    MessageCompleted,
    MessageDelta,
    TaskEvent,
    TaskId,
    TaskStarted,
    TerminalEvent,
    ToolCallChanged,
    UsageChanged,
    Warning,
)
from redis.asyncio import Redis
from redis.exceptions import RedisError

from harness.stream_reader import StreamEntry, StreamReader, comes_after
from harness.task import StreamRead
from wire.codec import dumps
from wire.errors import DecodeError
from wire.event_codec import (
    DIAGNOSTIC,
    RELAYED_NAMES,
    SEMANTIC,
    diagnostic_from_entry,
    event_from_entry,
)
from wire.interactions import resolution_to_json
from wire.keys import Keys

from .models import Outcome, PendingInteraction, usage_body
from .sse import FinalChunk

log = logging.getLogger(__name__)

ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
"""A Redis stream entry id: the only ``Last-Event-ID`` accepted."""

EVENT_NAMES = (
    "task_started",
    "message_delta",
    "message_completed",
    "usage_changed",
    "tool_call_changed",
    "effect_changed",
    "interaction_requested",
    "interaction_resolved",
    "warning",
    "diagnostic",
    "observation_gap",
    "task_completed",
    "task_failed",
    "task_cancelled",
    "task_unresolved",
    "task_created",
)

FIRST_EVENT_ID = "0-0"
"""The id of a start-and-stream response's ``task_created`` event: resuming after it
sends every entry of the task's stream."""

EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One Server-Sent Event (OpenAPI 3.1: the schema of each event).",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {
            "type": "string",
            "pattern": "^[0-9]+-[0-9]+$",
            "description": "Resume after this event with Last-Event-ID.",
        },
        "event": {"type": "string", "enum": list(EVENT_NAMES)},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "description": "A JSON object with task_id and the event's fields.",
        },
        "retry": {"type": "integer"},
    },
}

_IDLE = timedelta(seconds=2)
"""How long a stream waits for entries before it asks whether the task has settled."""
_BATCH = 256

_TERMINAL_NAMES = {
    "TaskCompleted": "task_completed",
    "TaskFailed": "task_failed",
    "TaskCancelled": "task_cancelled",
    "TaskUnresolved": "task_unresolved",
}


def encode_event(task_id: str, event: TaskEvent) -> tuple[str, dict[str, Any]]:
    """The SSE name and JSON data of one semantic event."""
    data: dict[str, Any] = {"task_id": task_id}
    if isinstance(event, TerminalEvent):
        outcome = Outcome.of(event.outcome)
        data["outcome"] = outcome.model_dump(mode="json")
        return _TERMINAL_NAMES[type(event).__name__], data
    if isinstance(event, TaskStarted):
        return "task_started", data
    if isinstance(event, MessageDelta | MessageCompleted):
        data.update(message_id=event.message_id.value, text=event.text, role=event.role.value)
        return ("message_delta" if isinstance(event, MessageDelta) else "message_completed"), data
    if isinstance(event, UsageChanged):
        data["task"] = usage_body(event.task).model_dump(mode="json")
        data["session"] = (
            None if event.session is None else usage_body(event.session).model_dump(mode="json")
        )
        return "usage_changed", data
    if isinstance(event, ToolCallChanged):
        data.update(
            work_id=event.work_id.value,
            name=event.name,
            status=event.status.value,
            arguments=event.arguments,
            result=event.result,
            error=event.error,
        )
        return "tool_call_changed", data
    if isinstance(event, EffectChanged):
        data.update(
            work_id=event.work_id.value,
            kind=event.kind.value,
            status=event.status.value,
            description=event.description,
            output=event.output,
        )
        return "effect_changed", data
    if isinstance(event, InteractionRequested):
        data.update(PendingInteraction.of(event.request).model_dump(mode="json"))
        return "interaction_requested", data
    if isinstance(event, InteractionResolved):
        data.update(
            interaction_id=event.interaction_id.value,
            resolution=resolution_to_json(event.resolution),
        )
        return "interaction_resolved", data
    if isinstance(event, Warning):
        data.update(kind=event.kind.value, message=event.message)
        return "warning", data
    raise TypeError(f"event {type(event).__name__} has no SSE encoding")


def encode_entry(task_id: str, fields: dict[str, str]) -> tuple[str, str, bool]:
    """The SSE name, JSON data and whether it is terminal, for one stream entry.

    A payload the workers wrote in the SSE event's own shape (``RELAYED_NAMES``) is
    relayed as it is, the task id spliced in front: no decoding, no encoding again. The
    rest (the terminal outcome, an interaction request, an entry written by an older
    worker, anything unreadable) is decoded and encoded as its event."""
    kind, tag, payload = fields.get("k", ""), fields.get("t", ""), fields.get("d", "")
    name = RELAYED_NAMES.get(tag)
    if (
        name is not None
        and (kind == DIAGNOSTIC) == (tag == "diagnostic")
        and kind in (SEMANTIC, DIAGNOSTIC)
        and payload.startswith("{")
        and payload.endswith("}")
        and "\n" not in payload
        and "\r" not in payload
    ):
        head = '{"task_id":' + dumps(task_id)
        return name, head + ("}" if payload == "{}" else "," + payload[1:]), False
    decoded, data, terminal = _decode_entry(task_id, kind, tag, payload)
    return decoded, dumps(data), terminal


def _decode_entry(
    task_id: str, kind: str, tag: str, payload: str
) -> tuple[str, dict[str, Any], bool]:
    try:
        if kind == DIAGNOSTIC:
            diagnostic = diagnostic_from_entry(TaskId(task_id), payload)
            return (
                "diagnostic",
                {
                    "task_id": task_id,
                    "provider": diagnostic.provider.value,
                    "name": diagnostic.name,
                    "payload": diagnostic.payload,
                },
                False,
            )
        event = event_from_entry(TaskId(task_id), tag, payload)
        name, data = encode_event(task_id, event)
    except (DecodeError, TypeError, ValueError):
        return "observation_gap", {"task_id": task_id, "dropped_events": 1}, False
    return name, data, isinstance(event, TerminalEvent)


def sse_event(entry_id: str, name: str, data: str) -> bytes:
    """One event as SSE bytes, as ``ServerSentEvent(...).encode()`` writes it, without its
    per-field line splitting: an entry id, one of ``EVENT_NAMES`` and compact JSON (which
    escapes every CR and LF) hold no line break."""
    return f"id: {entry_id}\r\nevent: {name}\r\ndata: {data}\r\n\r\n".encode()


def _encode_read(
    task_id: str, entries: Iterable[tuple[str, dict[str, str]]]
) -> tuple[bytes, str | None, bool]:
    """One SSE chunk for the entries of one read, up to a terminal one: the chunk (a
    ``FinalChunk`` if it ends with the terminal event), the id of its last entry
    (``None`` for no entry) and whether it ended with the terminal."""
    chunk: list[bytes] = []
    last: str | None = None
    for entry_id, fields in entries:
        last = entry_id
        name, data, terminal = encode_entry(task_id, fields)
        chunk.append(sse_event(entry_id, name, data))
        if terminal:
            return FinalChunk(b"".join(chunk)), last, True
    return b"".join(chunk), last, False


async def task_events(
    redis: Redis,
    keys: Keys,
    task_id: str,
    after: str,
    settled: Callable[[], Awaitable[bool]],
    reads: tuple[str, AsyncIterator[StreamRead]] | None = None,
    *,
    reader: StreamReader | None = None,
) -> AsyncIterator[bytes]:
    """The task's events after entry ``after`` (``0-0``: from the first), ending after
    the terminal one. ``settled()`` says whether the task is terminal or gone: a cursor
    already past the terminal entry (or a stream that expired) ends the stream instead
    of waiting forever. Yields encoded SSE text, the events of one read at a time.

    ``reads`` (a task handle's ``follow_reads()``) relays the reads of a handle of this
    process instead of reading the stream a second time; entries between ``after`` and
    the handle's position are read here first, and whatever the relay cannot give (it fell
    behind, or its reader stopped before the terminal entry) is read here too.

    The stream is followed through ``reader`` (the harness's stream reader: one
    connection for every stream of the process); without one, through a reader of its
    own on a connection like ``redis``'s. ``redis`` serves the other reads."""
    key = keys.events(task_id)
    last = after
    if reads is not None:
        position, relayed = reads
        try:
            if comes_after(position, last):
                backlog = await redis.xrange(key, f"({last}", position)
                chunk, end, terminal = _encode_read(task_id, cast(list[StreamEntry], backlog or []))
                if end is not None:
                    last = end
                    yield chunk
                if terminal:
                    return
            async for read in relayed:
                if read.dropped:
                    break  # fell behind: read the rest from the stream
                fresh = [entry for entry in read.entries if comes_after(entry[0], last)]
                chunk, end, terminal = _encode_read(task_id, fresh)
                if end is not None:
                    last = end
                    yield chunk
                if terminal:
                    return
        except (RedisError, HarnessTransportError) as error:
            log.warning("event stream of task %s ended early: %s", task_id, type(error).__name__)
            return
        finally:
            await cast(Any, relayed).aclose()
    own = reader is None
    following = StreamReader.beside(redis) if reader is None else reader
    stream = following.follow(key, last, idle=_IDLE)
    try:
        async for batch in stream:
            entries: Sequence[StreamEntry] = batch
            if not entries:
                if not await settled():
                    continue
                # The terminal entry is appended in the same step that settles the
                # record: one more read sees it if it is after the cursor.
                reply = await redis.xread({key: last}, count=_BATCH)
                if not reply:
                    return
                entries = cast(list[tuple[str, list[StreamEntry]]], reply)[0][1]
            if entries and not comes_after(entries[0][0], last):
                # Read here before the reader brought them: not sent twice.
                entries = [entry for entry in entries if comes_after(entry[0], last)]
            # Every entry one read returned goes out as one chunk: one send through the
            # middleware and one socket write per read, not per event.
            chunk, end, terminal = _encode_read(task_id, entries)
            if end is not None:
                last = end
                yield chunk
            if terminal:
                return
    except (RedisError, HarnessTransportError) as error:
        # The client reconnects with the last id it received and misses nothing.
        log.warning("event stream of task %s ended early: %s", task_id, type(error).__name__)
        return
    finally:
        await stream.aclose()
        if own:
            await following.aclose()


__all__ = [
    "ENTRY_ID",
    "FIRST_EVENT_ID",
    "encode_entry",
    "encode_event",
    "sse_event",
    "task_events",
]
