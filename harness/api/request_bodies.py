"""Request bodies of the HTTP API: strict, validated before any handler runs.

A body refuses unknown fields and values not of their field's JSON type, and text that
cannot be stored (lone surrogates). The response bodies are in ``harness.api.models``."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from wire.narrowing import Narrowing


class IfBusyChoice(StrEnum):
    """What to do when the session is running another task."""

    REJECT = "reject"
    """Refuse with 409 ``session-busy`` (the AHP default)."""
    ENQUEUE = "enqueue"
    """Queue the task behind the running one; the session's tasks run strictly in order."""


def _valid_unicode(value: str | None) -> str | None:
    """Refuse lone surrogates (valid JSON escapes, not text): they cannot be stored."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("text must be valid Unicode (no lone surrogates)") from None
    return value


class _Strict(BaseModel):
    """A request body: unknown fields are refused, and every value must already be of
    its field's JSON type (no ``"yes"`` or ``1`` for a boolean, no ``"5"`` for an
    integer). Enumerations take their string values (``strict=False`` on those fields:
    a body is parsed as Python objects, where a strict enum would want the enum)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _Narrowing(_Strict):
    tools: list[str] | None = Field(
        default=None,
        max_length=256,
        description="Offer only these of the profile's tools (default: all offered here); "
        "a tool not offered here is refused (422).",
    )
    token_budget: int | None = Field(
        default=None,
        description="A smaller token budget per task than the profile's (or the session's); "
        "a larger one is refused (422).",
    )

    def narrowing(self) -> Narrowing:
        return Narrowing(None if self.tools is None else tuple(self.tools), self.token_budget)


class CreateSession(_Narrowing):
    instructions: str | None = Field(
        default=None, description="System instructions sent with every model call."
    )
    persistent: bool = Field(
        default=False,
        description="Keep the session's context after DELETE, for POST .../reopen.",
    )

    _unicode = field_validator("instructions")(_valid_unicode)


class ReopenSession(_Strict):
    instructions: str | None = Field(
        default=None,
        description="New instructions; allowed only while no other handle of the context is open.",
    )

    _unicode = field_validator("instructions")(_valid_unicode)


class Webhook(_Strict):
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="Receives a POST of the settled task (JSON, signed with "
        "``Webhook-Signature``); its host must be allow-listed.",
    )


class TaskBody(_Narrowing):
    input: str = Field(min_length=1, description="The task's text input.")
    output_schema: dict[str, Any] | StrictBool | None = Field(
        default=None,
        description="A JSON Schema (Draft 2020-12) the answer must conform to. The "
        "completed task's output is then structured: the document and whether it is "
        "``valid``, ``invalid`` or ``not_validated``. A schema that is not a usable "
        "Draft 2020-12 schema (or references anything outside itself) is refused (422).",
    )
    webhook: Webhook | None = None

    _unicode = field_validator("input")(_valid_unicode)


class StartTask(TaskBody):
    if_busy: IfBusyChoice = Field(default=IfBusyChoice.REJECT, strict=False)


class OnCompletion(StrEnum):
    """What becomes of a run's session once its task settled (LangGraph's ``on_completion``
    of a stateless run)."""

    DELETE = "delete"
    """The session takes this one task and ends with it: the step that settles the task
    releases the session and deletes its stored context."""
    KEEP = "keep"
    """The session stays open for more tasks, as one created by ``POST /v1/sessions``,
    until ``DELETE /v1/sessions/{session_id}``."""


class RunTask(TaskBody):
    """A task in a session of its own (``POST /v1/tasks``): the session ends with it, or
    stays open for more with ``on_completion: keep``."""

    instructions: str | None = Field(
        default=None, description="System instructions sent with every model call."
    )
    on_completion: OnCompletion = Field(
        default=OnCompletion.DELETE,
        strict=False,
        description="``delete``: the session ends with this task. ``keep``: it stays open "
        "for more tasks until DELETE (a session and its first task in one request).",
    )

    _instructions_unicode = field_validator("instructions")(_valid_unicode)


class ApprovalAnswer(_Strict):
    kind: Literal["approval"]
    decision: Literal["approve_once", "approve_for_session", "decline", "cancel"]


class QuestionAnswer(_Strict):
    kind: Literal["answer"]
    text: str = Field(min_length=1, max_length=100_000)

    _unicode = field_validator("text")(_valid_unicode)


class Interaction(_Strict):
    response: ApprovalAnswer | QuestionAnswer = Field(discriminator="kind")


__all__ = [
    "ApprovalAnswer",
    "CreateSession",
    "IfBusyChoice",
    "Interaction",
    "OnCompletion",
    "QuestionAnswer",
    "ReopenSession",
    "RunTask",
    "StartTask",
    "TaskBody",
    "Webhook",
]
