"""The tool call a reply of the local model makes: planned, never left to the model.

Small models do not choose tools reliably. With the model option ``plan`` (a JSON list of
``{"tool", "args"?}``, ``workers/plans.py``) each reply makes the plan's next call whose
tool is offered, then the model answers in text; with ``tool_choice`` naming a tool (or
``"any"``) the first reply of each task calls that tool. Arguments the plan fixes are used
as given; the model writes the others, constrained by a grammar made from the tool's JSON
Schema (restricted to the arguments it writes). Hints tell the small model which tool it
calls, and what it was asked once a tool answered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

from .plans import PlannedCall, calls_since_question, next_call, questions


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """The tool call of one reply: the tool (OpenAI format) and the arguments fixed for it."""

    tool: dict[str, Any]
    fixed: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.tool["function"]["name"])

    def open_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the arguments the model writes, or ``None`` when the fixed
        ones are all there is to write (every required one given, and at least one).

        A string without a ``maxLength`` is bounded to ``ARGUMENT_CHARACTERS`` here (the
        grammar only; the tool's own schema is unchanged), so a rambling model closes its
        JSON well before ``max_tokens`` instead of being cut off mid-string."""
        schema = self.tool["function"].get("parameters") or {"type": "object", "properties": {}}
        properties = dict(schema.get("properties") or {})
        required = [name for name in schema.get("required") or () if name not in self.fixed]
        if self.fixed and not required:
            return None
        return {
            **schema,
            "properties": {
                name: _bounded(prop) for name, prop in properties.items() if name not in self.fixed
            },
            "required": required,
        }


ARGUMENT_CHARACTERS = 100
"""The longest string argument the local model is allowed to write (see ``open_schema``).
Every token adds at least one character, so a call's JSON ends within about this many
tokens plus its syntax, under the default ``max_tokens``."""


def _bounded(prop: Any) -> Any:
    if isinstance(prop, dict) and prop.get("type") == "string" and "maxLength" not in prop:
        return {**prop, "maxLength": ARGUMENT_CHARACTERS}
    return prop


def planned_call(
    messages: Sequence[BaseMessage],
    tools: Sequence[dict[str, Any]],
    tool_choice: object,
    plan: Sequence[PlannedCall] = (),
) -> ToolPlan | None:
    """The tool call this reply must make, or ``None`` to answer in text.

    A ``tool_choice`` naming a tool forces it; otherwise the plan's next call whose tool
    is offered; otherwise ``tool_choice`` ``"any"``/``"required"`` forces the first tool.
    A forced tool is called once per task: after the latest question, a reply that
    already called a tool is followed by text."""
    if not tools:
        return None
    by_name = {tool["function"]["name"]: tool for tool in tools}
    forced: str | None = None
    if isinstance(tool_choice, str) and tool_choice in by_name:
        forced = tool_choice
    elif isinstance(tool_choice, dict):
        forced = str(tool_choice.get("function", {}).get("name", "")) or None
    if forced is None:
        step = next_call(plan, messages, by_name)
        if step is not None:
            return ToolPlan(by_name[step.tool], step.args)
        if tool_choice in {"any", "required"}:
            forced = next(iter(by_name))
    if forced not in by_name or any(True for _ in calls_since_question(messages)):
        return None
    return ToolPlan(by_name[forced], {})


def call_hint(call: ToolPlan, messages: Sequence[BaseMessage]) -> str:
    """Before a planned call, tell a small model which tool and for which question (the
    turn before is often a tool's result, which it would otherwise copy)."""
    asked = (questions(messages) or [""])[-1]
    description = call.tool["function"].get("description", "")
    return (
        f"The user asked: {asked}\n"
        f"Call the tool {call.name} ({description}) for the user's question. "
        "Write only its arguments as one JSON object."
    )


def answer_hint(messages: Sequence[BaseMessage]) -> str:
    """After a tool's result, remind a small model what it was asked."""
    asked = (questions(messages) or [""])[-1]
    return f"Now answer the user's question in one sentence: {asked}"


def json_object(written: str) -> dict[str, Any] | None:
    """``written`` as a JSON object, or ``None``. Control characters inside strings are
    accepted: the grammar lets the model write a raw line break in a string."""
    try:
        value = json.loads(written, strict=False)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def merged_arguments(call: ToolPlan, written: str) -> dict[str, Any] | str:
    """The fixed arguments over what the model wrote; what it wrote as given when it is
    not a JSON object (the tool call then fails to parse, visibly)."""
    generated = json_object(written)
    if generated is None:
        return written
    return {**generated, **call.fixed}


__all__ = [
    "ARGUMENT_CHARACTERS",
    "ToolPlan",
    "answer_hint",
    "call_hint",
    "json_object",
    "merged_arguments",
    "planned_call",
]
