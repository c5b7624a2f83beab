"""How events, outcomes and usage look: lines for people, JSON objects for programs.

``print_event`` / ``print_outcome`` are the demo's event log (every event on its own line,
answer text streamed inline; a pipeline's status-tool calls as the step transitions they
are, an approval-gated tool's effect as the change it made). ``to_json`` turns any AHP
record (event, outcome, usage, interaction) into plain JSON: a dataclass becomes an
object with its class name as ``type``, an id its string, an enum its value, an
exception ``{"type", "message"}``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from enum import Enum
from typing import Any

from agent_harness_protocol import (
    AgentUsage,
    ApprovalRequest,
    Cancelled,
    Cleared,
    Completed,
    EffectChanged,
    Failed,
    InteractionRequested,
    InteractionResolved,
    MessageCompleted,
    MessageDelta,
    StructuredOutput,
    TaskEvent,
    TaskOutcome,
    TaskStarted,
    TerminalEvent,
    TextOutput,
    ToolCallChanged,
    Unresolved,
    UsageChanged,
    Warning,
    WorkStatus,
)

from wire.pipelines import STATUS_TOOL

from .console import console

__all__ = [
    "outcome_detail",
    "print_event",
    "print_outcome",
    "step_transition",
    "to_json",
    "usage_text",
]


def usage_text(usage: AgentUsage | None) -> str:
    """``input=7 output=3 total=10``; unknown fields are left out, never shown as zero."""
    if usage is None:
        return "not reported"
    parts = [
        f"{label}={value}"
        for label, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("total", usage.total_tokens),
        )
        if value is not None
    ]
    return " ".join(parts) or "unknown"


def print_event(event: TaskEvent, streaming: bool) -> bool:
    """Print one event; returns whether a message is being streamed inline."""
    if isinstance(event, MessageDelta):
        if not streaming:
            console.print("  [cyan]MessageDelta[/]   ", end="")
        console.print(event.text, end="", markup=False)
        return True
    if streaming:
        console.print()
    if isinstance(event, TaskStarted):
        console.print(f"  [cyan]TaskStarted[/]    task {event.task_id.value}")
    elif isinstance(event, MessageCompleted):
        line = f"{event.role.value}, {len(event.text)} characters"
        console.print(f"  [cyan]MessageCompleted[/] ({line})")
    elif isinstance(event, ToolCallChanged) and event.name == STATUS_TOOL:
        console.print("  [cyan]ToolCallChanged[/]  ", end="")
        console.print(step_transition(event), markup=False)
    elif isinstance(event, ToolCallChanged):
        detail = {
            "started": event.arguments,
            "completed": event.result,
        }.get(event.status.value, event.error)
        console.print("  [cyan]ToolCallChanged[/]  ", end="")
        console.print(f"{event.status.value} {event.name}: {detail}", markup=False)
    elif isinstance(event, EffectChanged):
        console.print("  [bold magenta]EffectChanged[/]    ", end="")
        console.print(f"{event.status.value}: {event.output or event.description}", markup=False)
    elif isinstance(event, InteractionRequested):
        kind = "approval" if isinstance(event.request, ApprovalRequest) else "question"
        console.print(f"  [bold magenta]InteractionRequested[/] {kind} ", end="")
        console.print(f"{event.request.interaction_id.value}", markup=False)
    elif isinstance(event, InteractionResolved):
        resolution = event.resolution
        how = (
            f"cleared ({resolution.reason.value})"
            if isinstance(resolution, Cleared)
            else "answered"
        )
        console.print(f"  [magenta]InteractionResolved[/] {how}")
    elif isinstance(event, Warning):
        console.print(f"  [yellow]Warning[/]          {event.kind.value}: ", end="")
        console.print(event.message, markup=False)
    elif isinstance(event, UsageChanged):
        line = f"task {usage_text(event.task)}, session {usage_text(event.session)}"
        console.print(f"  [cyan]UsageChanged[/]   {line}")
    elif isinstance(event, TerminalEvent):
        console.print(f"  [bold cyan]{type(event).__name__}[/]")
    else:
        console.print(f"  {type(event).__name__} {event}", markup=False)
    return False


def step_transition(event: ToolCallChanged) -> str:
    """A status-tool call as the pipeline step transition it asks for, or made.

    The status tool's successful transition has no text result (it updates the pipeline
    state); a transition it refuses is a completed call whose result is the refusal."""
    try:
        arguments = json.loads(event.arguments or "{}")
    except ValueError:
        arguments = {}
    if not isinstance(arguments, dict):
        arguments = {}
    step = f"step {arguments.get('task', '?')} -> {arguments.get('status', '?')}"
    if event.status is WorkStatus.STARTED:
        return f"pipeline {step} requested"
    if event.status is WorkStatus.COMPLETED and not event.result:
        return f"pipeline {step}"
    reason = event.result or event.error or ""
    return f"pipeline {step} refused ({event.status.value}): {' '.join(reason.split())}"


def outcome_detail(outcome: TaskOutcome) -> str:
    """What the outcome says beyond its kind: a stop reason, a failure, what is known."""
    if isinstance(outcome, Completed):
        return f"stop reason: {outcome.stop_reason.value}"
    if isinstance(outcome, Failed):
        return f"{outcome.kind.value}: {outcome.message}"
    if isinstance(outcome, Unresolved):
        return f"{outcome.reason.value}: {outcome.known}"
    if isinstance(outcome, Cancelled):
        return "its work stopped"
    return str(outcome)


def print_outcome(outcome: TaskOutcome) -> None:
    kind = type(outcome).__name__
    style = "green" if isinstance(outcome, Completed) else "red"
    detail = (
        f" (stop reason: {outcome.stop_reason.value})" if isinstance(outcome, Completed) else ""
    )
    console.print(f"Outcome: [bold {style}]{kind}[/]{detail}")
    output = outcome.output
    if isinstance(output, TextOutput):
        shown = output.text
    elif isinstance(output, StructuredOutput):
        shown = f"{output.json}  [schema: {output.validation.value}]"
    else:
        shown = str(output)
    console.print("  output:         ", end="")
    console.print(shown, markup=False)
    if not isinstance(outcome, Completed):
        console.print(f"  details:        {outcome}", markup=False)
    console.print(f"  usage:          {usage_text(outcome.usage)}")
    console.print(f"  session usage:  {usage_text(outcome.session_usage)}")


def _is_id(value: object) -> bool:
    """The AHP's opaque ids: a frozen dataclass whose one field is ``value: str``."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return False
    names = [field.name for field in dataclasses.fields(value)]
    return names == ["value"] and isinstance(getattr(value, "value", None), str)


def to_json(value: Any) -> Any:
    """A JSON-ready view of an AHP record (see the module docstring)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Enum):
        return value.value
    if _is_id(value):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data: dict[str, Any] = {"type": type(value).__name__}
        for field in dataclasses.fields(value):
            data[field.name] = to_json(getattr(value, field.name))
        return data
    if isinstance(value, BaseException):
        return {"type": type(value).__name__, "message": str(value)}
    if isinstance(value, Mapping):
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, frozenset | set):
        return sorted((to_json(item) for item in value), key=str)
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    return str(value)
