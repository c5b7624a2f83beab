"""The stream entries of a task: semantic events and provider diagnostics, as JSON.

Each entry of a task's Redis Stream carries its kind ``k`` (:data:`SEMANTIC` or
:data:`DIAGNOSTIC`), a type tag ``t`` and a JSON payload ``d``; the task id is the
stream's. Decoding accepts only the known tags, so no stored value can make either side
instantiate an arbitrary class. The terminal entry carries the outcome as
``wire.codec`` encodes it.
"""

from __future__ import annotations

from typing import Any

from agent_harness_protocol import (
    EffectChanged,
    EffectKind,
    InteractionId,
    InteractionRequested,
    InteractionResolved,
    MessageCompleted,
    MessageDelta,
    MessageId,
    MessageRole,
    ProviderDiagnostic,
    ProviderId,
    TaskEvent,
    TaskId,
    TaskStarted,
    ToolCallChanged,
    UsageChanged,
    Warning,
    WarningKind,
    WorkId,
    WorkStatus,
)

from .codec import dumps, loads, outcome_from_json, terminal_event, usage_from_json, usage_to_json
from .errors import DecodeError
from .interactions import InteractionPayload, resolution_from_json, resolution_to_json

# Stream entry kinds.
SEMANTIC = "e"
DIAGNOSTIC = "d"


# -- semantic events ----------------------------------------------------------------------

TERMINAL_TAG = "terminal"
INTERACTION_TAG = "interaction"
"""``InteractionRequested``: the payload is the interrupt's ``InteractionPayload`` JSON,
appended by the worker's pause script (``interaction_entry``)."""
RESOLVED_TAG = "resolved"
"""``InteractionResolved``: appended by the scripts that record a response or clear a
pending interaction."""


def interaction_entry(payload: InteractionPayload) -> tuple[str, str]:
    """The stream entry ``(tag, json)`` of an interrupt's ``InteractionRequested``."""
    return INTERACTION_TAG, dumps(payload.to_json())


def event_to_entry(event: TaskEvent) -> tuple[str, str]:
    """Encode a non-terminal semantic event as ``(tag, json)``; the task id is the stream."""
    if isinstance(event, TaskStarted):
        return "started", "{}"
    if isinstance(event, MessageDelta):
        return "delta", dumps([event.message_id.value, event.text, event.role.value])
    if isinstance(event, MessageCompleted):
        return "message", dumps([event.message_id.value, event.text, event.role.value])
    if isinstance(event, UsageChanged):
        return "usage", dumps(
            {
                "task": usage_to_json(event.task),
                "session": None if event.session is None else usage_to_json(event.session),
            }
        )
    if isinstance(event, ToolCallChanged):
        return "tool", dumps(
            {
                "work_id": event.work_id.value,
                "name": event.name,
                "status": event.status.value,
                "arguments": event.arguments,
                "result": event.result,
                "error": event.error,
            }
        )
    if isinstance(event, Warning):
        return "warning", dumps({"kind": event.kind.value, "message": event.message})
    if isinstance(event, InteractionResolved):
        return RESOLVED_TAG, dumps(
            {
                "interaction_id": event.interaction_id.value,
                "resolution": resolution_to_json(event.resolution),
            }
        )
    if isinstance(event, EffectChanged):
        return "effect", dumps(
            {
                "work_id": event.work_id.value,
                "kind": event.kind.value,
                "status": event.status.value,
                "description": event.description,
                "output": event.output,
            }
        )
    raise TypeError(f"event {type(event).__name__} has no wire encoding")


def event_from_entry(
    task_id: TaskId, tag: str, payload: str, cause_factory: Any = None
) -> TaskEvent:
    try:
        if tag == "started":
            return TaskStarted(task_id)
        data = loads(payload)
        if tag == "delta":
            return MessageDelta(task_id, MessageId(data[0]), data[1], MessageRole(data[2]))
        if tag == "message":
            return MessageCompleted(task_id, MessageId(data[0]), data[1], MessageRole(data[2]))
        if tag == "usage":
            session = data.get("session")
            return UsageChanged(
                task_id,
                usage_from_json(data["task"]),
                None if session is None else usage_from_json(session),
            )
        if tag == "tool":
            return ToolCallChanged(
                task_id,
                WorkId(data["work_id"]),
                data["name"],
                WorkStatus(data["status"]),
                data.get("arguments"),
                data.get("result"),
                data.get("error"),
            )
        if tag == "warning":
            return Warning(task_id, WarningKind(data["kind"]), data["message"])
        if tag == INTERACTION_TAG:
            return InteractionRequested(task_id, InteractionPayload.from_json(data).to_request())
        if tag == RESOLVED_TAG:
            return InteractionResolved(
                task_id,
                InteractionId(data["interaction_id"]),
                resolution_from_json(data["resolution"]),
            )
        if tag == "effect":
            return EffectChanged(
                task_id,
                WorkId(data["work_id"]),
                EffectKind(data["kind"]),
                WorkStatus(data["status"]),
                data.get("description"),
                data.get("output"),
            )
        if tag == TERMINAL_TAG:
            return terminal_event(outcome_from_json(data, cause_factory))
    except (KeyError, IndexError, ValueError, TypeError) as error:
        raise DecodeError(f"malformed {tag!r} event: {error}") from error
    raise DecodeError(f"unknown event tag {tag!r}")


def diagnostic_to_entry(diagnostic: ProviderDiagnostic) -> tuple[str, str]:
    return "diagnostic", dumps([diagnostic.provider.value, diagnostic.name, diagnostic.payload])


def diagnostic_from_entry(task_id: TaskId, payload: str) -> ProviderDiagnostic:
    try:
        provider, name, body = loads(payload)
        return ProviderDiagnostic(task_id, ProviderId(provider), str(name), str(body))
    except (ValueError, TypeError) as error:
        raise DecodeError(f"malformed diagnostic: {error}") from error
