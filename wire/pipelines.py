"""Task pipelines (seed 002): an ordered list of steps a profile's agent works through.

A pipeline is part of an agent profile (``AgentProfile.pipeline``), declared once and
loaded by callers and workers alike; ``to_json()`` is covered by the profile's digest.
Each step has an instruction (added to the system prompt while the step is in
progress), the tools visible while it is in progress (names of the profile's tools,
besides the pipeline's global tools and the status tool), whether it is required before
the agent may finish, and optionally a completion validator (an import path) whose
rejection is returned to the model instead of completing the step.

The model drives each step ``pending -> in_progress -> complete`` through the status
tool :data:`STATUS_TOOL`. With ``enforce_order`` a step cannot start before every step
ahead of it is complete. An agent that tries to finish with a required step incomplete
is nudged back to work, at most ``max_nudges`` times per task. The state lives in the
graph's checkpoint (``workers/steering.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .errors import ProfileError

STATUS_TOOL = "update_task_status"
"""The status tool the model calls to move a step (langchain-task-steering's name)."""

_STEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
MAX_NUDGES_LIMIT = 20


class StepStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETE = "complete"


def _require_target(what: str, target: str) -> None:
    module, _, attribute = target.partition(":")
    if not module or not attribute:
        raise ProfileError(f"{what} {target!r} must be 'package.module:attribute'")


@dataclass(frozen=True, slots=True)
class PipelineStep:
    """One step of a pipeline.

    ``validator``: import path ``"package.module:attribute"`` of a completion validator,
    a (sync or async) callable given a read-only view of the run's state (its messages and
    the steps' statuses) that returns ``None`` to allow completing the step, or the reason
    it may not be completed yet (returned to the model).
    """

    name: str
    instruction: str
    tools: tuple[str, ...] = ()
    required: bool = True
    validator: str | None = None

    def __post_init__(self) -> None:
        if _STEP_NAME.fullmatch(self.name) is None:
            raise ProfileError(
                f"pipeline step name {self.name!r} must be 1-64 letters, digits, '_' or '-'"
            )
        if not self.instruction.strip():
            raise ProfileError(f"pipeline step {self.name!r} needs an instruction")
        object.__setattr__(self, "tools", tuple(self.tools))
        if len(set(self.tools)) != len(self.tools):
            raise ProfileError(f"pipeline step {self.name!r} names a tool twice")
        if self.validator is not None:
            _require_target(f"validator of pipeline step {self.name!r}", self.validator)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "instruction": self.instruction,
            "tools": list(self.tools),
            "required": self.required,
            "validator": self.validator,
        }


@dataclass(frozen=True, slots=True)
class Pipeline:
    """An ordered task pipeline."""

    steps: tuple[PipelineStep, ...]
    global_tools: tuple[str, ...] = ()
    """Tools (names of the profile's tools) visible in every step. A profile tool that no
    step names is visible in every step too."""
    enforce_order: bool = True
    max_nudges: int = 3
    """How many times per task an agent that tries to finish with a required step
    incomplete is sent back to work; after that it may finish."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "global_tools", tuple(self.global_tools))
        if not self.steps:
            raise ProfileError("a pipeline needs at least one step")
        names = [step.name for step in self.steps]
        if len(set(names)) != len(names):
            raise ProfileError("pipeline step names must be unique")
        if not 0 <= self.max_nudges <= MAX_NUDGES_LIMIT:
            raise ProfileError(f"max_nudges must be between 0 and {MAX_NUDGES_LIMIT}")
        if STATUS_TOOL in self.global_tools or any(STATUS_TOOL in s.tools for s in self.steps):
            raise ProfileError(f"{STATUS_TOOL!r} is the pipeline's own status tool")

    @property
    def required_steps(self) -> tuple[str, ...]:
        return tuple(step.name for step in self.steps if step.required)

    def step(self, name: str) -> PipelineStep | None:
        return next((step for step in self.steps if step.name == name), None)

    def scoped_tools(self) -> frozenset[str]:
        """Every tool the pipeline names (in a step or globally)."""
        return frozenset(self.global_tools).union(*(step.tools for step in self.steps))

    def unknown_tools(self, declared: Iterable[str]) -> tuple[str, ...]:
        """The tools the pipeline names that ``declared`` (the profile's tools) lacks."""
        known = set(declared)
        return tuple(sorted(name for name in self.scoped_tools() if name not in known))

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": [step.to_json() for step in self.steps],
            "global_tools": list(self.global_tools),
            "enforce_order": self.enforce_order,
            "max_nudges": self.max_nudges,
        }


__all__ = ["MAX_NUDGES_LIMIT", "STATUS_TOOL", "Pipeline", "PipelineStep", "StepStatus"]
