"""The worker side of interactions: asking at an interrupt, pausing, and resuming.

- :func:`ask_approval` / :func:`ask_question` run inside a graph node (the tool guard's
  approval route, the question tool): they raise LangGraph's ``interrupt(payload)`` with
  an :class:`~wire.interactions.InteractionPayload`, and on the resumed run, where the
  node replays, return the caller's response. An approval whose tool the caller approved
  for the session (``Keys.grants``) is not asked again.
- :func:`interrupts_of` finds the payloads in a run's ``updates`` stream; the runner then
  pauses the task (``RecordStore.pause``: awaiting the caller, lease released, delivery
  acknowledged).
- :func:`resume_values` maps the paused graph's interrupts to the responses the caller
  recorded: the ``Command(resume=...)`` of the run that resumes it, on any worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_harness_protocol import (
    AgentUsage,
    AnswerResponse,
    ApprovalDecision,
    ApprovalResponse,
    InteractionResponse,
)
from langgraph.types import interrupt

from wire.codec import loads
from wire.errors import DecodeError
from wire.interactions import (
    InteractionKind,
    InteractionPayload,
    approval_decisions,
    grant_scope,
    interaction_id,
    resolution_from_json,
    response_from_resume,
    resume_value,
)
from wire.store import RecordStore

from .errors import InteractionError

INTERRUPT_KEY = "__interrupt__"
"""The key of an ``updates`` stream item that carries a run's interrupts."""


@dataclass(frozen=True, slots=True)
class Pause:
    """The run stopped at interrupts: what it asks the caller."""

    payloads: tuple[InteractionPayload, ...]
    usage: AgentUsage = AgentUsage.UNKNOWN
    """What the task's runs measured up to the pause."""


async def ask_approval(
    store: RecordStore,
    *,
    session_id: str,
    task_id: str,
    tool_call_id: str,
    tool: str,
    arguments: Mapping[str, Any],
    effect: str,
    session_grant: str | None,
    prompt: str | None = None,
) -> ApprovalDecision:
    """The caller's decision on one tool call (interrupts the run until it is given).

    ``APPROVE_FOR_SESSION`` is offered only when ``session_grant`` describes the grant; a
    tool granted for the session is approved without asking (the grant is enforced here,
    on the worker)."""
    if session_grant is not None and await store.granted(session_id, grant_scope(tool)):
        return ApprovalDecision.APPROVE_FOR_SESSION
    payload = InteractionPayload(
        kind=InteractionKind.APPROVAL,
        interaction_id=interaction_id(task_id, tool_call_id),
        tool_call_id=tool_call_id,
        tool=tool,
        prompt=prompt or (f"Allow {tool} to run? It {effect}." if effect else f"Allow {tool}?"),
        arguments=dict(arguments),
        effect=effect,
        work_id=tool_call_id,
        available_decisions=approval_decisions(session_grant),
        session_grant=session_grant,
    )
    response = _answer_to(payload, interrupt(payload.to_json()))
    assert isinstance(response, ApprovalResponse)
    return response.decision


def ask_question(
    *,
    task_id: str,
    tool_call_id: str,
    tool: str,
    prompt: str,
    choices: Sequence[str] = (),
) -> str:
    """The caller's answer to a question (interrupts the run until it is given)."""
    payload = InteractionPayload(
        kind=InteractionKind.QUESTION,
        interaction_id=interaction_id(task_id, tool_call_id),
        tool_call_id=tool_call_id,
        tool=tool,
        prompt=prompt,
        work_id=tool_call_id,
        choices=tuple(choices),
    )
    response = _answer_to(payload, interrupt(payload.to_json()))
    assert isinstance(response, AnswerResponse)
    return response.text


def _answer_to(payload: InteractionPayload, value: Any) -> InteractionResponse:
    try:
        response = response_from_resume(value)
        payload.check(response)
    except (DecodeError, ValueError) as error:
        raise InteractionError(
            f"the resume value does not answer interaction {payload.interaction_id}: {error}"
        ) from error
    return response


def interrupts_of(update: Mapping[str, Any]) -> tuple[InteractionPayload, ...]:
    """The interaction payloads an ``updates`` stream item announces (none for others)."""
    raised = update.get(INTERRUPT_KEY)
    if not raised:
        return ()
    payloads: list[InteractionPayload] = []
    for item in raised:
        value = getattr(item, "value", None)
        if isinstance(value, Mapping) and "interaction_id" in value:
            payloads.append(InteractionPayload.from_json(value))
    return tuple(payloads)


async def resume_values(
    store: RecordStore, task_id: str, interrupts: Sequence[Any]
) -> dict[str, Any] | None:
    """``{interrupt id: resume value}`` for a paused graph whose interrupts (LangGraph's
    ``Interrupt`` objects of the thread's state) are this task's and all answered; None
    when there is nothing to resume (no interrupt of this task)."""
    raised, resolved = await store.interactions(task_id)
    values: dict[str, Any] = {}
    for item in interrupts:
        value = getattr(item, "value", None)
        if not isinstance(value, Mapping):
            continue
        key = str(value.get("interaction_id", ""))
        if key not in raised:
            continue  # not this task's (another task of the session stopped there)
        resolution = resolution_from_json(loads(resolved[key])) if key in resolved else None
        response = getattr(resolution, "response", None)
        if response is None:
            raise InteractionError(f"interaction {key} of task {task_id} has no response")
        values[str(item.id)] = resume_value(response)
    return values or None


__all__ = [
    "INTERRUPT_KEY",
    "InteractionError",
    "Pause",
    "ask_approval",
    "ask_question",
    "interrupts_of",
    "resume_values",
]
