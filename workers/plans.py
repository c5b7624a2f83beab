"""Planned tool calls: the ordered plan a demo model follows, one call per reply.

Small models do not choose tools reliably, and the scripted stand-in does not choose at
all, so the demo's agents get their tool calls from a plan (the model option ``plan``, a
JSON list):

    [{"tool": "update_task_status", "args": {"task": "count", "status": "in_progress"}},
     {"tool": "word_count"},
     ...]

Each entry names a tool and optionally fixes some of its arguments; the model supplies
the rest (the scripted model quotes the question, the local model generates them under
the tool's JSON Schema). Each reply makes the next planned call whose tool is offered
(a pipeline offers a step's tools only while the step is in progress; a call whose tool
is not offered is skipped); once the plan is used up, the model answers in text.

Where the plan stands is read from the conversation, never kept: the calls made since the
task's question are matched against the plan in order, so a resumed run (or a replayed
node) carries on where the checkpointed thread is. A pipeline's nudge (a user message
the steering middleware adds) is not a new question.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from .errors import ModelBuildError

NUDGE_MARKER = "task_steering"
"""``additional_kwargs`` key of the pipeline middleware's messages (nudges)."""


@dataclass(frozen=True, slots=True)
class PlannedCall:
    """One entry of a plan: a tool and the arguments fixed for it (used as given)."""

    tool: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", MappingProxyType(dict(self.args)))

    def matches(self, name: str, args: Mapping[str, Any]) -> bool:
        """Whether a call the model made is this entry's call."""
        return name == self.tool and all(args.get(k) == v for k, v in self.args.items())


def parse_plan(raw: object) -> tuple[PlannedCall, ...]:
    """The plan of a model option: a list of ``{"tool": name, "args": {...}}``, or that
    list as JSON text (profile options are flat JSON values).

    Raises:
        ModelBuildError: not such a list.
    """
    if raw is None:
        return ()
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as error:
            raise ModelBuildError(f"the model option 'plan' is not JSON: {error}") from None
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise ModelBuildError("the model option 'plan' must be a list of tool calls")
    plan: list[PlannedCall] = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("tool"), str):
            raise ModelBuildError(f"plan entry {index} needs a 'tool' name")
        unknown = set(entry) - {"tool", "args"}
        args = entry.get("args", {})
        if unknown or not isinstance(args, Mapping):
            raise ModelBuildError(
                f"plan entry {index} has only 'tool' and 'args' (an object of arguments)"
            )
        plan.append(PlannedCall(entry["tool"], args))
    return tuple(plan)


def is_nudge(message: BaseMessage) -> bool:
    return isinstance(message, HumanMessage) and NUDGE_MARKER in message.additional_kwargs


def questions(messages: Sequence[BaseMessage]) -> list[str]:
    """The texts of the caller's questions in the thread (nudges are not questions)."""
    return [m.text for m in messages if isinstance(m, HumanMessage) and not is_nudge(m)]


def question_index(messages: Sequence[BaseMessage]) -> int:
    """Where the latest question is in ``messages`` (-1: none)."""
    return max(
        (
            index
            for index, message in enumerate(messages)
            if isinstance(message, HumanMessage) and not is_nudge(message)
        ),
        default=-1,
    )


def calls_since_question(messages: Sequence[BaseMessage]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The tool calls made since the latest question, in order (name, arguments)."""
    for message in messages[question_index(messages) + 1 :]:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                yield call["name"], dict(call.get("args") or {})


def next_call(
    plan: Sequence[PlannedCall], messages: Sequence[BaseMessage], offered: Collection[str]
) -> PlannedCall | None:
    """The call this reply makes, or ``None`` to answer in text (see the module docstring)."""
    position = 0
    for name, args in calls_since_question(messages):
        position = next(
            (i + 1 for i in range(position, len(plan)) if plan[i].matches(name, args)), position
        )
    return next((entry for entry in plan[position:] if entry.tool in offered), None)


__all__ = [
    "PlannedCall",
    "calls_since_question",
    "is_nudge",
    "next_call",
    "parse_plan",
    "question_index",
    "questions",
]
