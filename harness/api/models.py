"""Response bodies of the HTTP API, and their conversion from the harness's records.
Everything here is data: no I/O. The request bodies are in ``harness.api.request_bodies``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from agent_harness_protocol import (
    AgentUsage,
    ApprovalRequest,
    InteractionRequest,
    QuestionRequest,
    TaskOutcome,
    TaskState,
)
from pydantic import BaseModel, ConfigDict, Field

from harness.info import SessionInfo, SettledView, TaskInfo
from harness.task import CeleryTask
from wire.codec import outcome_to_json, usage_to_json
from wire.usage import Usage


def usage_body(usage: AgentUsage) -> Usage:
    """``usage`` as the API's body (the one usage shape, ``wire.usage.Usage``)."""
    return Usage.model_validate(usage_to_json(usage))


class Output(BaseModel):
    """Text output."""

    text: str
    complete: bool


class StructuredOutputBody(BaseModel):
    """Structured output of a task started with an ``output_schema``."""

    model_config = ConfigDict(
        serialize_by_alias=True, validate_by_alias=True, validate_by_name=True
    )

    document: str = Field(
        alias="json",
        description="The JSON document of the answer (without a code fence around it), "
        "or the whole answer when it carries none.",
    )
    validation: Literal["valid", "invalid", "not_validated"] = Field(
        description="The worker's judgment of the answer against the schema."
    )
    complete: bool


class Outcome(BaseModel):
    """The task's one terminal judgment."""

    type: Literal["completed", "failed", "cancelled", "unresolved"]
    output: StructuredOutputBody | Output | None = Field(
        description="``null``: no output is known."
    )
    usage: Usage
    session_usage: Usage | None
    stop_reason: str | None = Field(default=None, description="completed: why it stopped.")
    kind: str | None = Field(default=None, description="failed: the kind of failure.")
    message: str | None = Field(default=None, description="failed: what failed.")
    reason: str | None = Field(default=None, description="unresolved: why it is unknown.")
    known: str | None = Field(default=None, description="unresolved: what is known.")

    @classmethod
    def of(cls, outcome: TaskOutcome) -> Outcome:
        data: dict[str, Any] = outcome_to_json(outcome)
        data.pop("task_id", None)
        data.pop("cause", None)
        return cls.model_validate(data)


class SessionResource(BaseModel):
    id: str
    persistent: bool
    closed: bool
    active_task_id: str | None = Field(description="The session's unsettled (or last) task.")
    queued_task_ids: list[str] = Field(description="Tasks queued behind it, in run order.")
    turns: int = Field(description="Completed turns.")
    usage: Usage | None

    @classmethod
    def of(cls, info: SessionInfo) -> SessionResource:
        return cls(
            id=info.id,
            persistent=info.persistent,
            closed=info.closed,
            active_task_id=info.active_task,
            queued_task_ids=list(info.queued_tasks),
            turns=info.turns,
            usage=None if info.usage is None else usage_body(info.usage),
        )


class Released(BaseModel):
    id: str
    context_kept: bool = Field(description="A persistent session's context stays for reopen.")
    checkpoint_cleanup: Literal["done", "kept", "pending"] = Field(
        description="``pending``: deleting the stored context did not finish within the "
        "cleanup budget; a worker finishes it later."
    )


class SessionGrant(BaseModel):
    scope_id: str
    description: str = Field(description="What an approve_for_session decision allows.")


class PendingInteraction(BaseModel):
    """An approval or question the task waits for; answer it with
    ``POST /v1/tasks/{task_id}/interactions/{interaction_id}``."""

    interaction_id: str
    kind: Literal["approval", "question"]
    work_id: str | None = Field(description="The tool call it is about.")
    prompt: str
    detail: str | None
    effect: str | None = Field(default=None, description="approval: the kind of effect.")
    available_decisions: list[str] = Field(
        default_factory=list, description="approval: the decisions it accepts."
    )
    session_grant: SessionGrant | None = Field(
        default=None, description="approval: the enforced scope of approve_for_session."
    )
    choices: list[str] = Field(default_factory=list, description="question: its choices.")
    allows_free_form: bool = Field(default=False, description="question: any text is accepted.")

    @classmethod
    def of(cls, request: InteractionRequest) -> PendingInteraction:
        work_id = None if request.work_id is None else request.work_id.value
        if isinstance(request, ApprovalRequest):
            grant = request.session_grant
            return cls(
                interaction_id=request.interaction_id.value,
                kind="approval",
                work_id=work_id,
                prompt=request.prompt,
                detail=request.detail,
                effect=None if request.effect is None else request.effect.value,
                available_decisions=sorted(d.value for d in request.available_decisions),
                session_grant=None
                if grant is None
                else SessionGrant(scope_id=grant.scope_id.value, description=grant.description),
            )
        assert isinstance(request, QuestionRequest)
        return cls(
            interaction_id=request.interaction_id.value,
            kind="question",
            work_id=work_id,
            prompt=request.prompt,
            detail=request.detail,
            choices=list(request.choices),
            allows_free_form=request.allows_free_form,
        )


class TaskResource(BaseModel):
    id: str
    session_id: str
    state: TaskState
    outcome: Outcome | None = Field(description="Set once the task is terminal.")
    queued: bool = Field(
        description="Waiting behind its session's running task, or for its tenant's "
        "running limit (docs/tenants.md)."
    )
    cancel_requested: bool
    created_at: datetime | None
    claimed_at: datetime | None = Field(description="The latest claim by a worker.")
    settled_at: datetime | None
    replayed: bool | None = Field(
        default=None,
        description="On creation: ``true`` when the Idempotency-Key returned an earlier task.",
    )
    pending_interactions: list[PendingInteraction] = Field(
        default_factory=list,
        description="awaiting_response: the approvals and questions the task waits for.",
    )

    @classmethod
    def of(cls, info: TaskInfo, *, replayed: bool | None = None) -> TaskResource:
        return cls(
            id=info.id,
            session_id=info.session_id,
            state=info.state,
            outcome=None if info.outcome is None else Outcome.of(info.outcome),
            queued=info.queued,
            cancel_requested=info.cancel_requested,
            created_at=info.created_at,
            claimed_at=info.claimed_at,
            settled_at=info.settled_at,
            replayed=replayed,
            pending_interactions=[PendingInteraction.of(r) for r in info.pending_interactions],
        )

    @classmethod
    def started(cls, task: CeleryTask) -> TaskResource:
        """A task this process has just started (not replayed): what its record holds,
        known from the start's reply."""
        return cls(
            id=task.id.value,
            session_id=task.session_id.value,
            state=TaskState.STARTING,
            outcome=None,
            queued=task.queued,
            cancel_requested=False,
            created_at=task.created_at,
            claimed_at=None,
            settled_at=None,
            replayed=False,
        )

    @classmethod
    def settled(
        cls,
        task: CeleryTask,
        outcome: TaskOutcome,
        view: SettledView,
        *,
        replayed: bool | None = None,
    ) -> TaskResource | None:
        """A task this process started and saw settle, from its terminal entry: what its
        record holds, without reading it (``None`` when the handle does not know when
        the task was created)."""
        if task.created_at is None:
            return None
        return cls(
            id=task.id.value,
            session_id=task.session_id.value,
            state=task.state,
            outcome=Outcome.of(outcome),
            queued=False,
            cancel_requested=view.cancel_requested,
            created_at=task.created_at,
            claimed_at=view.claimed_at,
            settled_at=view.settled_at,
            replayed=replayed,
        )


class Health(BaseModel):
    status: Literal["ok"]


__all__ = [
    "Health",
    "Outcome",
    "PendingInteraction",
    "Released",
    "SessionGrant",
    "SessionResource",
    "TaskResource",
    "Usage",
    "usage_body",
]
