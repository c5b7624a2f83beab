"""Every kind of stream entry as the SSE event the API sends (names, data, terminal),
from the same wire encoding the workers append with."""

from __future__ import annotations

import json

from agent_harness_protocol import (
    AgentUsage,
    Cleared,
    ClearReason,
    Completed,
    EffectChanged,
    EffectKind,
    Failed,
    FailureKind,
    InteractionId,
    InteractionResolved,
    MessageCompleted,
    MessageDelta,
    MessageId,
    MessageRole,
    ProviderDiagnostic,
    ProviderId,
    StopReason,
    TaskEvent,
    TaskId,
    TaskStarted,
    TextOutput,
    ToolCallChanged,
    UsageChanged,
    Warning,
    WarningKind,
    WorkId,
    WorkStatus,
)

from harness.api.events import EVENT_NAMES, EVENT_SCHEMA, encode_entry
from wire.codec import dumps, outcome_to_json
from wire.event_codec import (
    DIAGNOSTIC,
    INTERACTION_TAG,
    SEMANTIC,
    TERMINAL_TAG,
    diagnostic_to_entry,
    event_to_entry,
)
from wire.interactions import InteractionKind, InteractionPayload, approval_decisions

TASK = TaskId("t-1")
ASK = InteractionPayload(
    kind=InteractionKind.APPROVAL,
    interaction_id="i-1",
    tool_call_id="w",
    tool="search",
    prompt="Run it?",
    arguments={"q": "x"},
    effect="changes things",
    work_id="w",
    available_decisions=approval_decisions(None),
)
USAGE = AgentUsage(input_tokens=7, output_tokens=3, total_tokens=10)


def _entry(event: TaskEvent) -> dict[str, str]:
    tag, payload = event_to_entry(event)
    return {"k": SEMANTIC, "t": tag, "d": payload}


def test_every_event_kind_has_its_name_and_data() -> None:
    cases: list[tuple[dict[str, str], str, dict[str, object]]] = [
        (_entry(TaskStarted(TASK)), "task_started", {}),
        (
            _entry(MessageDelta(TASK, MessageId("m"), "par", MessageRole.ANSWER)),
            "message_delta",
            {"message_id": "m", "text": "par", "role": "answer"},
        ),
        (
            _entry(MessageCompleted(TASK, MessageId("m"), "partial", MessageRole.ANSWER)),
            "message_completed",
            {"message_id": "m", "text": "partial", "role": "answer"},
        ),
        (
            _entry(UsageChanged(TASK, USAGE, None)),
            "usage_changed",
            {
                "task": {
                    "input_tokens": 7,
                    "cached_input_tokens": None,
                    "output_tokens": 3,
                    "reasoning_tokens": None,
                    "total_tokens": 10,
                    "cache_write_input_tokens": None,
                },
                "session": None,
            },
        ),
        (
            _entry(
                ToolCallChanged(TASK, WorkId("w"), "search", WorkStatus.FAILED, "{}", None, "x")
            ),
            "tool_call_changed",
            {
                "work_id": "w",
                "name": "search",
                "status": "failed",
                "arguments": "{}",
                "result": None,
                "error": "x",
            },
        ),
        (
            _entry(EffectChanged(TASK, WorkId("w"), EffectKind.OTHER, WorkStatus.COMPLETED, "did")),
            "effect_changed",
            {
                "work_id": "w",
                "kind": "other",
                "status": "completed",
                "description": "did",
                "output": None,
            },
        ),
        (
            {"k": SEMANTIC, "t": INTERACTION_TAG, "d": dumps(ASK.to_json())},
            "interaction_requested",
            {
                "interaction_id": "i-1",
                "kind": "approval",
                "work_id": "w",
                "prompt": "Run it?",
                "detail": 'search({"q":"x"}): changes things',
                "effect": "other",
                "available_decisions": ["approve_once", "cancel", "decline"],
                "session_grant": None,
                "choices": [],
                "allows_free_form": False,
            },
        ),
        (
            _entry(
                InteractionResolved(
                    TASK, InteractionId("i-1"), Cleared(ClearReason.CANCELLATION_REQUESTED)
                )
            ),
            "interaction_resolved",
            {
                "interaction_id": "i-1",
                "resolution": {"type": "cleared", "reason": "cancellation_requested"},
            },
        ),
        (
            _entry(Warning(TASK, WarningKind.RECOVERABLE, "resumed")),
            "warning",
            {"kind": "recoverable", "message": "resumed"},
        ),
        (
            {
                "k": DIAGNOSTIC,
                "t": "diagnostic",
                "d": diagnostic_to_entry(ProviderDiagnostic(TASK, ProviderId("p"), "n", "body"))[1],
            },
            "diagnostic",
            {"provider": "p", "name": "n", "payload": "body"},
        ),
        (
            {"k": SEMANTIC, "t": "delta", "d": "not json"},
            "observation_gap",
            {"dropped_events": 1},
        ),
        ({"k": SEMANTIC, "t": "no-such-tag", "d": "{}"}, "observation_gap", {"dropped_events": 1}),
    ]
    for fields, name, data in cases:
        event, text, terminal = encode_entry(TASK.value, fields)
        assert (event, json.loads(text), terminal) == (name, {"task_id": "t-1", **data}, False)
        assert name in EVENT_NAMES


def test_terminal_entries_carry_the_outcome_and_end_the_stream() -> None:
    completed = Completed(TASK, StopReason.FINISHED, TextOutput("done"), USAGE, USAGE)
    failed = Failed(TASK, FailureKind.PROVIDER, "model error", None, None, USAGE, None)
    for outcome, name in ((completed, "task_completed"), (failed, "task_failed")):
        fields = {"k": SEMANTIC, "t": TERMINAL_TAG, "d": dumps(outcome_to_json(outcome))}
        event, text, terminal = encode_entry(TASK.value, fields)
        data = json.loads(text)
        assert (event, terminal) == (name, True)
        assert data["outcome"]["type"] == name.removeprefix("task_")
        assert data["outcome"]["usage"]["total_tokens"] == 10
    _, text, _ = encode_entry(
        TASK.value, {"k": SEMANTIC, "t": TERMINAL_TAG, "d": dumps(outcome_to_json(failed))}
    )
    data = json.loads(text)
    assert data["outcome"]["session_usage"] is None  # unknown stays unknown
    assert data["outcome"]["output"] is None
    json.dumps(data)  # plain JSON


def test_the_published_event_schema_names_every_event() -> None:
    assert EVENT_SCHEMA["properties"]["event"]["enum"] == list(EVENT_NAMES)
    assert {"task_completed", "task_failed", "task_cancelled", "task_unresolved"} <= set(
        EVENT_NAMES
    )


def test_events_are_written_as_sse_starlette_writes_them_whatever_their_text() -> None:
    from sse_starlette import ServerSentEvent

    from harness.api.events import sse_event
    from wire.codec import dumps

    for text in ["plain", "two\nlines", "cr\rand crlf\r\n", "sep\u2028\u2029", "", "ü 🙂"]:
        data = dumps({"task_id": "t", "text": text})
        expected = ServerSentEvent(data=data, event="message_delta", id="1-0").encode()
        assert sse_event("1-0", "message_delta", data) == expected


def test_payloads_in_the_events_shape_are_relayed_as_they_were_written() -> None:
    """The relay splices the task id in front of the worker's bytes: no re-encoding (the
    key order and spacing a decode-and-encode would normalise stay as written)."""
    written = '{"work_id":"w","name":"search","status":"running","arguments":"{}",'
    written += '"result":null,"error":null}'
    name, text, terminal = encode_entry(TASK.value, {"k": SEMANTIC, "t": "tool", "d": written})
    assert (name, terminal) == ("tool_call_changed", False)
    assert text == '{"task_id":"t-1",' + written[1:]
    _, started, _ = encode_entry(TASK.value, _entry(TaskStarted(TASK)))
    assert started == '{"task_id":"t-1"}'
    # An object in another key order is relayed as written too: not normalised.
    reordered = '{"error":null,"work_id":"w","status":"running","name":"search"}'
    _, text, _ = encode_entry(TASK.value, {"k": SEMANTIC, "t": "tool", "d": reordered})
    assert text == '{"task_id":"t-1",' + reordered[1:]  # an object: relayed as written
    # Decoded, not relayed: the list older workers wrote, and a line break that would
    # split the SSE field.
    legacy = {"k": SEMANTIC, "t": "delta", "d": json.dumps(["m", "par", "answer"])}
    spread = {"k": SEMANTIC, "t": "usage", "d": '{"task":{},\n"session":null}'}
    for fields, name in ((legacy, "message_delta"), (spread, "usage_changed")):
        event, text, _ = encode_entry(TASK.value, fields)
        assert event == name
        assert "\n" not in text
        assert json.loads(text)["task_id"] == "t-1"
    assert json.loads(encode_entry(TASK.value, legacy)[1]) == {
        "task_id": "t-1",
        "message_id": "m",
        "text": "par",
        "role": "answer",
    }
    # A diagnostic tag under the semantic kind is not relayed as a diagnostic.
    mixed = {"k": SEMANTIC, "t": "diagnostic", "d": '{"provider":"p","name":"n","payload":"b"}'}
    assert encode_entry(TASK.value, mixed)[0] == "observation_gap"
