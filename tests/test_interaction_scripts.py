"""The interaction scripts on the suite's Redis: a paused task holds no lease, a response is
recorded exactly once and makes the task due, cancellation clears pending interactions
first. Observations are the records and streams in Redis."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from uuid import uuid4

import pytest
from agent_harness_protocol import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalResponse,
    Cleared,
    ClearReason,
    InteractionId,
    InteractionRequested,
    InteractionResolved,
    Responded,
    TaskId,
)

from wire.event_codec import event_from_entry, event_to_entry, interaction_entry
from wire.interactions import (
    InteractionKind,
    InteractionPayload,
    approval_decisions,
    grant_scope,
    interaction_id,
    resolution_to_json,
)
from wire.store import (
    CancelResult,
    ClaimResult,
    PauseResult,
    RecordStore,
    RespondResult,
)

from .support.records import ZERO_USAGE, loss_policy, scratch_store

_POLICY = loss_policy()
_MEASURED = json.dumps({**ZERO_USAGE, "input_tokens": 7, "output_tokens": 3, "total_tokens": 10})


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RecordStore]:
    async with scratch_store(redis_url, "interact") as store:
        yield store


def _payload(task_id: str, *, grant: str | None = None) -> InteractionPayload:
    return InteractionPayload(
        kind=InteractionKind.APPROVAL,
        interaction_id=interaction_id(task_id, "call-1"),
        tool_call_id="call-1",
        tool="write_file",
        prompt="Write notes.txt?",
        arguments={"path": "notes.txt"},
        effect="writes a file",
        work_id="call-1",
        available_decisions=approval_decisions(grant),
        session_grant=grant,
    )


async def _paused(
    store: RecordStore, *, grant: str | None = None
) -> tuple[str, str, InteractionPayload]:
    """A claimed task whose run paused at one approval: ``(session, task, payload)``."""
    session_id, task_id = uuid4().hex, uuid4().hex
    await store.create_session(session_id, {"persistent": "0"})
    await store.start_task(session_id, task_id, json.dumps({"text": "x"}), queue="scripts")
    claim = await store.claim(session_id, task_id, uuid4().hex, 60_000, _POLICY)
    assert claim.result is ClaimResult.CLAIMED
    payload = _payload(task_id, grant=grant)
    paused = await store.pause(
        session_id, task_id, claim.lease, _MEASURED, [(payload.interaction_id, _json(payload))]
    )
    assert paused is PauseResult.PAUSED
    return session_id, task_id, payload


def _json(payload: InteractionPayload) -> str:
    return interaction_entry(payload)[1]


async def _respond(
    store: RecordStore,
    session_id: str,
    task_id: str,
    payload: InteractionPayload,
    decision: ApprovalDecision = ApprovalDecision.APPROVE_ONCE,
) -> tuple[RespondResult, str, str, str]:
    resolution = Responded(ApprovalResponse(decision))
    event = InteractionResolved(TaskId(task_id), InteractionId(payload.interaction_id), resolution)
    return await store.respond(
        session_id,
        task_id,
        payload.interaction_id,
        json.dumps(resolution_to_json(resolution)),
        event_to_entry(event)[1],
        grant=decision is ApprovalDecision.APPROVE_FOR_SESSION,
        cancels=decision is ApprovalDecision.CANCEL,
    )


async def _events(store: RecordStore, task_id: str) -> list[object]:
    entries = await store.redis.xrange(store.keys.events(task_id))
    return [
        event_from_entry(TaskId(task_id), fields["t"], fields["d"])
        for _, fields in entries
        if fields["k"] == "e"
    ]


async def test_a_paused_task_holds_no_lease_and_is_claimed_only_once_answered(
    store: RecordStore,
) -> None:
    session_id, task_id, payload = await _paused(store)
    record = await store.task_record(task_id)
    assert record["state"] == "awaiting_response"
    assert record["awaiting"] == payload.interaction_id
    assert not await store.redis.exists(store.keys.lease(session_id))
    assert await store.redis.zscore(store.keys.running(), task_id) is None
    events = await _events(store, task_id)
    requested = [event for event in events if isinstance(event, InteractionRequested)]
    assert len(requested) == 1
    assert isinstance(requested[0].request, ApprovalRequest)
    assert requested[0].request.interaction_id.value == payload.interaction_id

    early = await store.claim(session_id, task_id, uuid4().hex, 60_000, _POLICY)
    assert early.result is ClaimResult.WAITING

    assert (await _respond(store, session_id, task_id, payload))[0] is RespondResult.OK
    again, prior, _, _ = await _respond(
        store, session_id, task_id, payload, ApprovalDecision.DECLINE
    )
    assert again is RespondResult.RESOLVED
    assert json.loads(prior)["response"]["decision"] == "approve_once"
    assert await store.redis.zscore(store.keys.starting(), task_id) is not None

    resumed = await store.claim(session_id, task_id, uuid4().hex, 60_000, _POLICY)
    assert resumed.result is ClaimResult.CLAIMED
    assert resumed.previous_state == "awaiting_response"
    assert resumed.deliveries == 1  # a resume is not a lost delivery
    duplicate = await store.claim(session_id, task_id, uuid4().hex, 60_000, _POLICY)
    assert duplicate.result is ClaimResult.BUSY
    resolved = [
        event for event in await _events(store, task_id) if isinstance(event, InteractionResolved)
    ]
    assert [event.resolution for event in resolved] == [
        Responded(ApprovalResponse(ApprovalDecision.APPROVE_ONCE))
    ]


async def test_a_response_to_an_unknown_interaction_changes_nothing(store: RecordStore) -> None:
    session_id, task_id, _ = await _paused(store)
    other = _payload(task_id)
    stranger = InteractionPayload(
        kind=other.kind,
        interaction_id=interaction_id(task_id, "call-2"),
        tool_call_id="call-2",
        tool=other.tool,
        prompt=other.prompt,
        available_decisions=other.available_decisions,
    )
    assert (await _respond(store, session_id, task_id, stranger))[0] is RespondResult.UNKNOWN
    assert not await store.redis.exists(store.keys.responses(task_id))
    assert (await store.task_record(task_id)).get("resume") is None


async def test_cancellation_clears_pending_interactions_first_and_settles_a_paused_task(
    store: RecordStore,
) -> None:
    session_id, task_id, payload = await _paused(store)
    result, encoded, _ = await store.cancel(session_id, task_id)
    assert result is CancelResult.SETTLED
    outcome = json.loads(encoded)
    assert outcome["type"] == "cancelled"
    assert outcome["usage"]["input_tokens"] == 7  # what the run measured before pausing
    events = await _events(store, task_id)
    resolutions = [event for event in events if isinstance(event, InteractionResolved)]
    assert [event.resolution for event in resolutions] == [
        Cleared(ClearReason.CANCELLATION_REQUESTED)
    ]
    assert events.index(resolutions[0]) == len(events) - 2  # before the terminal entry
    assert (await _respond(store, session_id, task_id, payload))[0] is RespondResult.TERMINAL
    assert await store.redis.ttl(store.keys.responses(task_id)) > 0
    assert (await store.session_record(session_id))["active"] == ""


async def test_a_run_cannot_pause_once_cancelled_or_without_its_lease(store: RecordStore) -> None:
    session_id, task_id = uuid4().hex, uuid4().hex
    await store.create_session(session_id, {"persistent": "0"})
    await store.start_task(session_id, task_id, json.dumps({"text": "x"}), queue="scripts")
    claim = await store.claim(session_id, task_id, uuid4().hex, 60_000, _POLICY)
    payload = _payload(task_id)
    entry = [(payload.interaction_id, _json(payload))]
    assert await store.pause(session_id, task_id, "1:stale", _MEASURED, entry) is PauseResult.STALE
    await store.cancel(session_id, task_id)
    assert (
        await store.pause(session_id, task_id, claim.lease, _MEASURED, entry)
        is PauseResult.CANCELLED
    )
    assert not await store.redis.exists(store.keys.interactions(task_id))
    assert (await store.task_record(task_id))["state"] == "running"


async def test_approve_for_session_grants_the_tool_until_the_session_is_released(
    store: RecordStore,
) -> None:
    session_id, task_id, payload = await _paused(store, grant="write_file in this session")
    scope = grant_scope(payload.tool)
    assert not await store.granted(session_id, scope)
    result, *_ = await _respond(
        store, session_id, task_id, payload, ApprovalDecision.APPROVE_FOR_SESSION
    )
    assert result is RespondResult.OK
    assert await store.granted(session_id, scope)
    await store.cancel(session_id, task_id)
    await store.release_session(session_id)
    assert not await store.redis.exists(store.keys.grants(session_id))
