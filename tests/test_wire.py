"""The wire contract on its own: settings, encodings, the fan-out primitive."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from agent_harness_protocol import (
    AgentUsage,
    Completed,
    Failed,
    FailureKind,
    MessageDelta,
    MessageId,
    MessageRole,
    ObservationGap,
    StopReason,
    TaskId,
    TextOutput,
    Unresolved,
    UnresolvedReason,
)

from harness.errors import RemoteTaskError
from harness.fanout import BoundedFanout
from wire.codec import RemoteCause, outcome_from_json, outcome_to_json
from wire.errors import DecodeError
from wire.event_codec import event_from_entry, event_to_entry
from wire.messages import (
    MaintenanceOperation,
    MaintenanceReply,
    MaintenanceRequest,
    RunMessage,
)
from wire.settings import Settings

TASK = TaskId("t1")


def test_durations_accept_plain_seconds_and_iso_8601(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AHP_LEASE_TTL", "2.5")
    monkeypatch.setenv("AHP_CLEANUP_TOTAL", "PT4S")
    settings = Settings()
    assert settings.lease_ttl == timedelta(seconds=2.5)
    assert settings.cleanup_total == timedelta(seconds=4)


def test_namespace_must_be_key_safe() -> None:
    with pytest.raises(ValueError, match="invalid namespace"):
        Settings(namespace="a b")


def test_outcomes_round_trip_with_unknown_usage_kept_unknown() -> None:
    partial = AgentUsage(input_tokens=3, output_tokens=None)
    for outcome in (
        Completed(TASK, StopReason.FINISHED, TextOutput("hi"), partial),
        Unresolved(TASK, UnresolvedReason.OBSERVATION_LOST, "worker lost"),
    ):
        assert outcome_from_json(outcome_to_json(outcome)) == outcome


def test_failed_cause_crosses_as_type_module_and_message() -> None:
    error = KeyError("missing")
    failed = Failed(TASK, FailureKind.UNKNOWN, "boom", error)
    data = outcome_to_json(failed, RemoteCause.of(error))
    decoded = outcome_from_json(data, lambda cause: RemoteTaskError(*vars_of(cause)))
    assert isinstance(decoded, Failed)
    assert isinstance(decoded.cause, RemoteTaskError)
    assert decoded.cause.type_name == "KeyError"
    assert decoded.cause.module == "builtins"
    assert "missing" in decoded.cause.remote_message


def vars_of(cause: RemoteCause) -> tuple[str, str, str]:
    return cause.type_name, cause.module, cause.message


def test_unknown_or_malformed_entries_are_decode_errors() -> None:
    with pytest.raises(DecodeError, match="unknown event tag"):
        event_from_entry(TASK, "os.system", "{}")
    with pytest.raises(DecodeError):
        event_from_entry(TASK, "delta", "not json")


def test_events_round_trip() -> None:
    delta = MessageDelta(TASK, MessageId("m"), "text", MessageRole.ANSWER)
    assert event_from_entry(TASK, *event_to_entry(delta)) == delta


async def test_fanout_counts_drops_exactly_where_they_happened_and_keeps_final_last() -> None:
    fanout = BoundedFanout[int](4, lambda count: -count)
    slow = fanout.subscribe()
    for item in range(10):
        fanout.publish(item)
    fanout.close(final=100)
    received = [item async for item in slow]
    assert received == [0, 1, 2, -7, 100]
    late = [item async for item in fanout.subscribe()]
    assert late == [100]


async def test_fanout_subscribers_are_independent() -> None:
    fanout = BoundedFanout[object](3, lambda count: ObservationGap(TASK, count))
    fast, slow = fanout.subscribe(), fanout.subscribe()
    fast_items: list[object] = []

    async def drain() -> None:
        async for item in fast:
            fast_items.append(item)

    reader = asyncio.create_task(drain())
    for item in range(5):
        fanout.publish(item)
        await asyncio.sleep(0)
    fanout.close(final="end")
    await reader
    slow_items = [item async for item in slow]
    assert fast_items == [0, 1, 2, 3, 4, "end"]
    assert slow_items[:2] == [0, 1]
    assert slow_items[2] == ObservationGap(TASK, 3)
    assert slow_items[-1] == "end"


def test_missing_package_imports_fail_fast_and_others_still_import() -> None:
    import importlib

    from workers.import_cache import fail_fast_if_missing

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("langchain.schema")  # the test assumes it is absent
    assert fail_fast_if_missing("langchain.schema")
    with pytest.raises(ModuleNotFoundError, match=r"No module named 'langchain\.schema"):
        importlib.import_module("langchain.schema.messages")
    assert importlib.import_module("langchain.agents") is not None
    assert importlib.import_module("langchain_core.messages") is not None
    assert not fail_fast_if_missing("json")


def test_run_message_carries_ids_only_and_refuses_hostile_ones() -> None:
    message = RunMessage("ns", "t1", "s1")
    assert message.kwargs() == {"namespace": "ns", "task_id": "t1", "session_id": "s1"}
    assert set(message.kwargs()) <= RunMessage.KEYWORDS
    assert RunMessage("ns", "t1").kwargs() == {"namespace": "ns", "task_id": "t1"}
    for hostile in ("", "a b", "x\n", "x:y"):
        with pytest.raises(ValueError, match="invalid"):
            RunMessage("ns", hostile)


@pytest.mark.parametrize(
    "raw",
    [
        "5",
        "null",
        "{}",
        "[1]",
        '{"id": "r1", "op": "drop_everything", "thread_id": "t"}',
        '{"id": "r1", "op": "delete_thread", "thread_id": "../x"}',
        '{"id": 5, "op": "delete_thread"}',
        '{"id": "r1", "op": "delete_thread", "thread_id": "t", "reply": "no"}',
        "not json",
    ],
)
def test_a_malformed_maintenance_request_or_reply_is_a_value_error(raw: str) -> None:
    with pytest.raises(ValueError, match="malformed maintenance request"):
        MaintenanceRequest.from_json(raw)
    if raw not in ("{}",):
        with pytest.raises(ValueError, match="malformed maintenance reply"):
            MaintenanceReply.from_json(raw)


def test_maintenance_messages_round_trip() -> None:
    request = MaintenanceRequest("r1", MaintenanceOperation.DELETE_THREAD, "thread-1")
    assert MaintenanceRequest.from_json(request.to_json()) == request
    quiet = MaintenanceRequest("r2", MaintenanceOperation.DELETE_THREAD, "t", reply=False)
    assert MaintenanceRequest.from_json(quiet.to_json()) == quiet
    # What the Lua prelude queues for a single-task session (cjson's encoding).
    lua = '{"op":"delete_thread","thread_id":"s1","id":"t1","reply":false}'
    assert MaintenanceRequest.from_json(lua) == MaintenanceRequest(
        "t1", MaintenanceOperation.DELETE_THREAD, "s1", reply=False
    )
    for reply in (MaintenanceReply(True), MaintenanceReply(False, "boom")):
        assert MaintenanceReply.from_json(reply.to_json()) == reply
