"""Narrowing a profile for one session or one task: fewer tools, a smaller token budget.

AHP's ``SessionSpec`` and ``TaskRequest`` have no place for it, so the harness accepts
:class:`NarrowedSessionSpec` and :class:`NarrowedTaskRequest`, the AHP classes with one
more field. A narrowing may only narrow: a tool the profile (or the session) does not
offer, or a budget over the profile's (or the session's), is an admission issue, listed
with every other issue before anything is written. The session's narrowing is stored in
its spec, a task's in its input; the worker applies both to every step of the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent_harness_protocol import CompatibilityIssue, SessionSpec, TaskRequest

from .errors import DecodeError
from .profiles import AgentProfile


@dataclass(frozen=True, slots=True)
class Narrowing:
    """``tools``: the names of the only tools offered (``None``: all of them);
    ``token_budget``: a budget of measured tokens per task (``None``: the profile's)."""

    tools: tuple[str, ...] | None = None
    token_budget: int | None = None

    def __post_init__(self) -> None:
        if self.tools is not None:
            object.__setattr__(self, "tools", tuple(self.tools))

    def to_json(self) -> dict[str, Any]:
        return {
            "tools": None if self.tools is None else list(self.tools),
            "token_budget": self.token_budget,
        }

    @classmethod
    def from_json(cls, data: Any) -> Narrowing:
        if data is None:
            return NO_NARROWING
        if not isinstance(data, Mapping):
            raise DecodeError("a narrowing must be an object")
        tools = data.get("tools")
        budget = data.get("token_budget")
        if tools is not None and not (
            isinstance(tools, list) and all(isinstance(tool, str) for tool in tools)
        ):
            raise DecodeError("narrowing tools must be a list of names")
        if budget is not None and not isinstance(budget, int):
            raise DecodeError("narrowing token_budget must be an integer")
        return cls(None if tools is None else tuple(tools), budget)

    def within(self, outer: Narrowing) -> Narrowing:
        """This narrowing applied inside ``outer`` (a task's inside its session's)."""
        tools = self.tools if self.tools is not None else outer.tools
        budgets = [b for b in (self.token_budget, outer.token_budget) if b is not None]
        return Narrowing(tools, min(budgets) if budgets else None)


NO_NARROWING = Narrowing()


@dataclass(frozen=True, slots=True)
class NarrowedSessionSpec(SessionSpec):
    """A ``SessionSpec`` whose sessions offer less than the profile."""

    narrowing: Narrowing = NO_NARROWING


@dataclass(frozen=True, slots=True)
class NarrowedTaskRequest(TaskRequest):
    """A ``TaskRequest`` that offers less than its session."""

    narrowing: Narrowing = NO_NARROWING


def narrowing_of(value: SessionSpec | TaskRequest) -> Narrowing:
    return (
        value.narrowing
        if isinstance(value, NarrowedSessionSpec | NarrowedTaskRequest)
        else NO_NARROWING
    )


def narrowing_issues(
    profile: AgentProfile, narrowing: Narrowing, outer: Narrowing = NO_NARROWING
) -> Iterable[CompatibilityIssue]:
    """Every way ``narrowing`` would widen ``profile`` (as already narrowed by ``outer``)."""
    offered = outer.tools if outer.tools is not None else tuple(t.name for t in profile.tools)
    for tool in narrowing.tools or ():
        if tool not in offered:
            yield CompatibilityIssue(
                "narrowing.tools", f"tool {tool!r} is not offered here; offered: {list(offered)}"
            )
    budget = narrowing.token_budget
    if budget is not None:
        ceilings = [
            b for b in (profile.safeguards.token_budget, outer.token_budget) if b is not None
        ]
        if budget < 1:
            yield CompatibilityIssue("narrowing.token_budget", "a token budget must be positive")
        elif ceilings and budget > min(ceilings):
            yield CompatibilityIssue(
                "narrowing.token_budget",
                f"a budget of {budget} tokens widens the {min(ceilings)} allowed here",
            )
        elif not profile.tools and profile.pipeline is None and not ceilings:
            yield CompatibilityIssue(
                "narrowing.token_budget",
                f"profile {profile.name!r} runs one model call per task without safeguards; "
                "declare a token_budget in the profile to narrow it",
            )
