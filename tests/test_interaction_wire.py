"""The interaction wire schema: payloads, resume values and resolutions round trip as
JSON, ids are deterministic, and a response is checked against its request before
anything is sent."""

from __future__ import annotations

import json

import pytest
from agent_harness_protocol import (
    AnswerResponse,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalResponse,
    Cleared,
    ClearReason,
    InteractionId,
    InteractionResolved,
    QuestionRequest,
    Responded,
    TaskId,
)

from wire.errors import DecodeError
from wire.event_codec import event_from_entry, event_to_entry
from wire.interactions import (
    InteractionKind,
    InteractionPayload,
    approval_decisions,
    grant_scope,
    interaction_id,
    resolution_from_json,
    resolution_to_json,
    response_from_resume,
    resume_value,
)


def _approval(grant: str | None = None) -> InteractionPayload:
    return InteractionPayload(
        kind=InteractionKind.APPROVAL,
        interaction_id=interaction_id("task-1", "call-1"),
        tool_call_id="call-1",
        tool="write_file",
        prompt="Write it?",
        arguments={"path": "a.txt"},
        effect="writes a file",
        work_id="call-1",
        available_decisions=approval_decisions(grant),
        session_grant=grant,
    )


def test_interaction_ids_are_deterministic_key_safe_and_distinct() -> None:
    first = interaction_id("task-1", "call-1")
    assert first == interaction_id("task-1", "call-1")
    assert first != interaction_id("task-1", "call-2")
    assert first != interaction_id("task-2", "call-1")
    assert len(first) == 32
    assert first.isalnum()


def test_a_payload_round_trips_and_becomes_the_ahp_request() -> None:
    payload = _approval("write_file in this session")
    assert InteractionPayload.from_json(json.dumps(payload.to_json())) == payload
    request = payload.to_request()
    assert isinstance(request, ApprovalRequest)
    assert request.work_id is not None
    assert request.work_id.value == "call-1"
    assert ApprovalDecision.APPROVE_FOR_SESSION in request.available_decisions
    assert request.session_grant is not None
    assert request.session_grant.scope_id.value == grant_scope("write_file")
    assert request.detail is not None
    assert "writes a file" in request.detail
    without = _approval().to_request()
    assert isinstance(without, ApprovalRequest)
    assert without.session_grant is None
    assert ApprovalDecision.APPROVE_FOR_SESSION not in without.available_decisions


def test_approve_for_session_is_offered_exactly_with_a_described_grant() -> None:
    with pytest.raises(ValueError, match="session grant"):
        InteractionPayload(
            kind=InteractionKind.APPROVAL,
            interaction_id="i1",
            tool_call_id="c",
            tool="t",
            prompt="?",
            available_decisions=tuple(ApprovalDecision),
        )
    with pytest.raises(ValueError, match="describe"):
        _approval("   ")


def test_a_response_is_checked_against_its_request() -> None:
    payload = _approval()
    payload.check(ApprovalResponse(ApprovalDecision.DECLINE))
    with pytest.raises(ValueError, match="not offered"):
        payload.check(ApprovalResponse(ApprovalDecision.APPROVE_FOR_SESSION))
    with pytest.raises(ValueError, match="ApprovalResponse"):
        payload.check(AnswerResponse("yes"))
    question = InteractionPayload(
        kind=InteractionKind.QUESTION,
        interaction_id="i2",
        tool_call_id="c2",
        tool="ask_caller",
        prompt="Which?",
        choices=("a", "b"),
    )
    assert isinstance(question.to_request(), QuestionRequest)
    question.check(AnswerResponse("a"))
    with pytest.raises(ValueError, match="one of"):
        question.check(AnswerResponse("c"))
    with pytest.raises(ValueError, match="AnswerResponse"):
        question.check(ApprovalResponse(ApprovalDecision.APPROVE_ONCE))


def test_resume_values_and_resolutions_round_trip_and_refuse_the_unknown() -> None:
    for response in (ApprovalResponse(ApprovalDecision.APPROVE_ONCE), AnswerResponse("x")):
        assert response_from_resume(resume_value(response)) == response
    for resolution in (
        Responded(ApprovalResponse(ApprovalDecision.DECLINE)),
        Cleared(ClearReason.CANCELLATION_REQUESTED),
    ):
        assert resolution_from_json(resolution_to_json(resolution)) == resolution
        event = InteractionResolved(TaskId("t"), InteractionId("i"), resolution)
        tag, body = event_to_entry(event)
        assert event_from_entry(TaskId("t"), tag, body) == event
    for bad in ({"kind": "approval", "decision": "maybe"}, {"kind": "other"}, None):
        with pytest.raises(DecodeError):
            response_from_resume(bad)
    with pytest.raises(DecodeError):
        InteractionPayload.from_json('{"kind": "approval"}')
