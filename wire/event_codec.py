"""The stream entries of a task: semantic events and provider diagnostics, as JSON.

Each entry of a task's Redis Stream carries its kind ``k`` (:data:`SEMANTIC` or
:data:`DIAGNOSTIC`), a type tag ``t`` and a JSON payload ``d``; the task id is the
stream's. Decoding accepts only the known tags, so no stored value can make either side
instantiate an arbitrary class. The terminal entry carries the outcome as
``wire.codec`` encodes it.

Every payload but the terminal's and the interaction request's is a JSON object with the
fields of the HTTP API's SSE event of the same entry, less ``task_id``
(:data:`RELAYED_NAMES` names that event): the API relays those payloads as they are,
without decoding them (``harness.api.events``).
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


RELAYED_NAMES: dict[str, str] = {
    "started": "task_started",
    "delta": "message_delta",
    "message": "message_completed",
    "usage": "usage_changed",
    "tool": "tool_call_changed",
    "effect": "effect_changed",
    "warning": "warning",
    RESOLVED_TAG: "interaction_resolved",
    "diagnostic": "diagnostic",
}
"""The tags whose payload is the data of the API's SSE event (less ``task_id``), and the
name of that event. The terminal and interaction payloads are records the API reshapes."""


def interaction_entry(payload: InteractionPayload) -> tuple[str, str]:
    """The stream entry ``(tag, json)`` of an interrupt's ``InteractionRequested``."""
    return INTERACTION_TAG, dumps(payload.to_json())


def event_to_entry(event: TaskEvent) -> tuple[str, str]:
    """Encode a non-terminal semantic event as ``(tag, json)``; the task id is the stream."""
    if isinstance(event, TaskStarted):
        return "started", "{}"
    if isinstance(event, MessageDelta | MessageCompleted):
        return ("delta" if isinstance(event, MessageDelta) else "message"), dumps(
            {"message_id": event.message_id.value, "text": event.text, "role": event.role.value}
        )
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
        if tag == "delta" or tag == "message":
            message_id, text, role = _message_fields(data)
            kind = MessageDelta if tag == "delta" else MessageCompleted
            return kind(task_id, MessageId(message_id), text, MessageRole(role))
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


def _message_fields(data: Any) -> tuple[Any, Any, Any]:
    """A message entry's id, text and role: an object, or the ``[id, text, role]`` list
    that workers before the relay wrote (still read while their streams are retained)."""
    if isinstance(data, list):
        message_id, text, role = data
        return message_id, text, role
    return data["message_id"], data["text"], data["role"]


def diagnostic_to_entry(diagnostic: ProviderDiagnostic) -> tuple[str, str]:
    return "diagnostic", dumps(
        {
            "provider": diagnostic.provider.value,
            "name": diagnostic.name,
            "payload": diagnostic.payload,
        }
    )


def diagnostic_from_entry(task_id: TaskId, payload: str) -> ProviderDiagnostic:
    try:
        data = loads(payload)
        if isinstance(data, list):  # written before the relay (see _message_fields)
            provider, name, body = data
        else:
            provider, name, body = data["provider"], data["name"], data["payload"]
        return ProviderDiagnostic(task_id, ProviderId(provider), str(name), str(body))
    except (KeyError, ValueError, TypeError) as error:
        raise DecodeError(f"malformed diagnostic: {error}") from error
