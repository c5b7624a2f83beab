"""The wire schema of approvals and questions: interrupt payloads and resume values.

An approval-gated tool call, or the question tool, pauses the worker's graph with
LangGraph's ``interrupt(payload)``. The payload is a JSON object (:class:`InteractionPayload`)
that the worker also stores in Redis (``Keys.interactions``) and appends to the task's
stream as ``InteractionRequested``; the caller turns it into the AHP's
``ApprovalRequest`` / ``QuestionRequest``. The caller's answer travels back as the resume
value of ``Command(resume=...)`` (:func:`resume_value`): ``{"kind": "approval",
"decision": ...}`` or ``{"kind": "answer", "text": ...}``.

Interaction ids are derived from the task id and the tool call id
(:func:`interaction_id`): a node that LangGraph replays on resume produces the same id,
so a response is matched to its request across worker processes.

Only JSON crosses; decoders refuse what they do not know with ``DecodeError``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agent_harness_protocol import (
    AnswerResponse,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalResponse,
    ApprovalScopeId,
    Cleared,
    ClearReason,
    EffectKind,
    InteractionId,
    InteractionRequest,
    InteractionResolution,
    InteractionResponse,
    QuestionRequest,
    Responded,
    SessionApprovalGrant,
    WorkId,
)

from .errors import DecodeError


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class InteractionKind(StrEnum):
    APPROVAL = "approval"
    QUESTION = "question"


class ResumeKind(StrEnum):
    APPROVAL = "approval"
    ANSWER = "answer"


DECLINED_MESSAGE = "declined by the caller"
"""The tool result the model sees for a declined approval."""


def interaction_id(task_id: str, tool_call_id: str) -> str:
    """The deterministic id of the interaction a tool call of a task raises: the same on
    every replay of the node, on any worker. Key-safe (32 hex characters)."""
    digest = hashlib.sha256(f"{task_id}\x00{tool_call_id}".encode()).hexdigest()
    return f"i{digest[:31]}"


def grant_scope(tool: str) -> str:
    """The scope an APPROVE_FOR_SESSION decision grants: one tool, in one session."""
    return f"tool:{tool}"


@dataclass(frozen=True, slots=True)
class InteractionPayload:
    """What a paused graph asks the caller (the ``interrupt`` payload)."""

    kind: InteractionKind
    interaction_id: str
    tool_call_id: str
    tool: str
    prompt: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    effect: str = ""
    """What the tool changes, in words (shown to the approver)."""
    work_id: str = ""
    available_decisions: tuple[ApprovalDecision, ...] = ()
    session_grant: str | None = None
    """The enforced scope of an APPROVE_FOR_SESSION grant; None: not offered."""
    choices: tuple[str, ...] = ()
    """A question's choices (empty: free text)."""

    def __post_init__(self) -> None:
        if self.kind is InteractionKind.APPROVAL:
            if not self.available_decisions:
                raise ValueError("an approval offers at least one decision")
            offers_session = ApprovalDecision.APPROVE_FOR_SESSION in self.available_decisions
            if offers_session != (self.session_grant is not None):
                raise ValueError(
                    "APPROVE_FOR_SESSION is offered exactly when a session grant is described"
                )
            if self.session_grant is not None and not self.session_grant.strip():
                raise ValueError("a session grant must describe its scope")

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "interaction_id": self.interaction_id,
            "tool_call_id": self.tool_call_id,
            "tool": self.tool,
            "arguments": dict(self.arguments),
            "effect": self.effect,
            "work_id": self.work_id,
            "available_decisions": [decision.value for decision in self.available_decisions],
            "session_grant": self.session_grant,
            "prompt": self.prompt,
            "choices": list(self.choices),
        }

    @classmethod
    def from_json(cls, data: Any) -> InteractionPayload:
        try:
            if isinstance(data, str | bytes):
                data = json.loads(data)
            arguments = data.get("arguments") or {}
            grant = data.get("session_grant")
            if not isinstance(arguments, Mapping) or not isinstance(grant, str | None):
                raise TypeError("arguments must be an object, session_grant a string or null")
            return cls(
                kind=InteractionKind(data["kind"]),
                interaction_id=_text(data["interaction_id"]),
                tool_call_id=_text(data.get("tool_call_id", "")),
                tool=_text(data.get("tool", "")),
                prompt=_text(data.get("prompt", "")),
                arguments=dict(arguments),
                effect=_text(data.get("effect", "")),
                work_id=_text(data.get("work_id", "")),
                available_decisions=tuple(
                    ApprovalDecision(value) for value in data.get("available_decisions") or ()
                ),
                session_grant=grant,
                choices=tuple(_text(choice) for choice in data.get("choices") or ()),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise DecodeError(f"malformed interaction payload: {error}") from error

    def to_request(self) -> InteractionRequest:
        """The AHP request the caller sees."""
        work = WorkId(self.work_id) if self.work_id else None
        if self.kind is InteractionKind.QUESTION:
            return QuestionRequest(
                InteractionId(self.interaction_id), work, self.prompt, self.choices
            )
        grant = None
        if self.session_grant is not None:
            grant = SessionApprovalGrant(
                ApprovalScopeId(grant_scope(self.tool)), self.session_grant
            )
        detail = f"{self.tool}({_dumps(dict(self.arguments))})"
        if self.effect:
            detail = f"{detail}: {self.effect}"
        return ApprovalRequest(
            InteractionId(self.interaction_id),
            work,
            self.prompt,
            _effect_kind(self.effect),
            self.available_decisions,
            grant,
            detail,
        )

    def check(self, response: InteractionResponse) -> None:
        """Refuse a response this request cannot take (before anything is sent).

        Raises:
            ValueError: the wrong kind of response, or a decision the request does not offer.
        """
        if self.kind is InteractionKind.APPROVAL:
            if not isinstance(response, ApprovalResponse):
                raise ValueError(
                    f"interaction {self.interaction_id} is an approval; answer it with an "
                    f"ApprovalResponse, not {type(response).__name__}"
                )
            if response.decision not in self.available_decisions:
                offered = ", ".join(decision.value for decision in self.available_decisions)
                raise ValueError(
                    f"decision {response.decision.value!r} is not offered by interaction "
                    f"{self.interaction_id} (offered: {offered})"
                )
            return
        if not isinstance(response, AnswerResponse):
            raise ValueError(
                f"interaction {self.interaction_id} is a question; answer it with an "
                f"AnswerResponse, not {type(response).__name__}"
            )
        if self.choices and response.text not in self.choices:
            raise ValueError(f"the answer must be one of {list(self.choices)}")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _effect_kind(effect: str) -> EffectKind | None:
    if not effect:
        return None
    try:
        return EffectKind(effect)
    except ValueError:
        return EffectKind.OTHER


# -- resume values ------------------------------------------------------------------------


def resume_value(response: InteractionResponse) -> dict[str, str]:
    """The ``Command(resume=...)`` value of a caller's response."""
    if isinstance(response, ApprovalResponse):
        return {"kind": ResumeKind.APPROVAL.value, "decision": response.decision.value}
    if isinstance(response, AnswerResponse):
        return {"kind": ResumeKind.ANSWER.value, "text": response.text}
    raise ValueError(f"{type(response).__name__} is not a response this harness delivers")


def response_from_resume(data: Any) -> InteractionResponse:
    """The caller's response back from its resume value."""
    try:
        kind = ResumeKind(data["kind"])
        if kind is ResumeKind.APPROVAL:
            return ApprovalResponse(ApprovalDecision(data["decision"]))
        return AnswerResponse(_text(data["text"]))
    except (KeyError, TypeError, ValueError) as error:
        raise DecodeError(f"malformed resume value: {error}") from error


# -- resolutions ----------------------------------------------------------------------------


def resolution_to_json(resolution: InteractionResolution) -> dict[str, Any]:
    if isinstance(resolution, Responded):
        return {"type": "responded", "response": resume_value(resolution.response)}
    if isinstance(resolution, Cleared):
        return {"type": "cleared", "reason": resolution.reason.value}
    raise TypeError(f"unsupported resolution {type(resolution).__name__}")


def resolution_from_json(data: Any) -> InteractionResolution:
    try:
        if data["type"] == "responded":
            return Responded(response_from_resume(data["response"]))
        if data["type"] == "cleared":
            return Cleared(ClearReason(data["reason"]))
    except (KeyError, TypeError, ValueError) as error:
        raise DecodeError(f"malformed interaction resolution: {error}") from error
    raise DecodeError(f"unknown interaction resolution {data.get('type')!r}")


def cleared_json(reason: ClearReason) -> str:
    return _dumps(resolution_to_json(Cleared(reason)))


def approval_decisions(session_grant: str | None) -> tuple[ApprovalDecision, ...]:
    """The decisions an approval offers: APPROVE_FOR_SESSION only with a described grant."""
    decisions: Sequence[ApprovalDecision] = (
        ApprovalDecision.APPROVE_ONCE,
        ApprovalDecision.DECLINE,
        ApprovalDecision.CANCEL,
    )
    if session_grant is not None:
        decisions = (
            ApprovalDecision.APPROVE_ONCE,
            ApprovalDecision.APPROVE_FOR_SESSION,
            *decisions[1:],
        )
    return tuple(decisions)


__all__ = [
    "DECLINED_MESSAGE",
    "InteractionKind",
    "InteractionPayload",
    "ResumeKind",
    "approval_decisions",
    "cleared_json",
    "grant_scope",
    "interaction_id",
    "resolution_from_json",
    "resolution_to_json",
    "response_from_resume",
    "resume_value",
]
