"""Task pipelines on the worker: the profile's ``Pipeline`` as langchain-task-steering.

The published ``TaskSteeringMiddleware`` (seed 002) does the steering: before every model
call it appends the pipeline board and the active step's instruction to the system
prompt and offers only the active step's tools, the pipeline's global tools and the
status tool ``update_task_status``; it checks every transition (``pending ->
in_progress -> complete``, in order when ``enforce_order``), runs the step's completion
validator and returns a rejection to the model as the tool's answer, refuses a tool call
outside the active step, and sends an agent that tries to finish with a required step
incomplete back to the model (``max_nudges`` times; the count starts again with every
transition). Optional steps may also be ``aborted`` before any of their tools ran.

What this module adds:

- Pipeline state per AHP task. The library keeps the statuses in the graph state of the
  session's thread, initialised once; here a task whose id differs from the one the state
  was made for starts with every step pending and no nudges (a session's next task runs
  the pipeline again). The statuses, the nudge count and the task they belong to are
  graph state, checkpointed with the thread: a run resumed from the checkpoint after its
  worker was lost keeps them, and so goes on at the step it reached.
- Validators by import path (``PipelineStep.validator``): a sync or async callable given a
  :class:`StepCompletion` (the step, the statuses, the thread's messages and those since
  the step started) that returns ``None`` to allow completing the step, or the reason
  it may not be completed yet.
- Tools by name: the profile's tools are built once by the worker; steps and global tools
  name them. A tool that no step names is global (visible in every step), so is the
  built-in question tool.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, cast

from agent_harness_protocol import WorkStatus
from langchain.agents.middleware import AgentMiddleware, hook_config
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_task_steering import Task, TaskMiddleware, TaskSteeringMiddleware
from langchain_task_steering import TaskSteeringState as _LibraryState
from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from wire.errors import ProfileError
from wire.pipelines import Pipeline, PipelineStep, StepStatus

from .middleware import TASK_ID, ToolHandler
from .safeguards import halt_in
from .stream_items import ToolChange, canonical_arguments, report_notice, report_tool_change


def _task_id() -> str:
    return str(get_config().get("metadata", {}).get(TASK_ID, ""))


class PipelineState(_LibraryState):
    """The library's state, plus the task the pipeline statuses belong to."""

    pipeline_task: NotRequired[str]


@dataclass(frozen=True, slots=True)
class StepCompletion:
    """What a completion validator sees when the model asks to complete ``step``."""

    step: str
    statuses: Mapping[str, StepStatus]
    messages: tuple[BaseMessage, ...]
    """The thread's messages (the session's earlier turns included)."""
    step_messages: tuple[BaseMessage, ...]
    """The messages since the step went in progress."""


Validator = Callable[[StepCompletion], "str | Awaitable[str | None] | None"]


def load_validator(target: str) -> Validator:
    module_name, _, attribute = target.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ProfileError(f"cannot load pipeline validator {target!r}: {error}") from error
    if not callable(found):
        raise ProfileError(f"pipeline validator {target!r} is not callable")
    return cast(Validator, found)


def _completion(step: str, state: Mapping[str, Any]) -> StepCompletion:
    messages = tuple(state.get("messages") or ())
    statuses = {
        name: StepStatus(value) if value in set(StepStatus) else StepStatus.PENDING
        for name, value in (state.get("task_statuses") or {}).items()
    }
    start = (state.get("task_message_starts") or {}).get(step)
    since = messages[start:] if isinstance(start, int) else ()
    return StepCompletion(step, statuses, messages, since)


class _StepValidator(TaskMiddleware):
    """The step's validator as the library's task-scoped middleware."""

    def __init__(self, step: PipelineStep, validator: Validator) -> None:
        super().__init__()
        self._step = step.name
        self._validator = validator

    def validate_completion(self, state: dict[str, Any]) -> str | None:
        result = self._validator(_completion(self._step, state))
        if inspect.isawaitable(result):
            # The worker runs the agent asynchronously (avalidate_completion); a sync run
            # cannot await an async validator.
            close = getattr(result, "close", None)
            if close is not None:
                close()
            raise TypeError("an async pipeline validator needs the async agent")
        return result

    async def avalidate_completion(self, state: dict[str, Any]) -> str | None:
        result = self._validator(_completion(self._step, state))
        if inspect.isawaitable(result):
            return await result
        return result


class PipelineSteering(TaskSteeringMiddleware):
    """``TaskSteeringMiddleware`` whose pipeline state belongs to one AHP task."""

    def __init__(self, pipeline: Pipeline, tasks: list[Task], global_tools: list[BaseTool]):
        super().__init__(
            tasks,
            global_tools=global_tools,
            enforce_order=pipeline.enforce_order,
            required_tasks=list(pipeline.required_steps),
            max_nudges=pipeline.max_nudges,
        )
        self._step_names = [step.name for step in pipeline.steps]
        self._required = list(pipeline.required_steps)
        # Keep the library's merged schema's fields, and add ours.
        self.state_schema = PipelineState

    def before_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        task = _task_id()
        if state.get("pipeline_task") != task:
            return {
                "pipeline_task": task,
                "task_statuses": {name: StepStatus.PENDING.value for name in self._step_names},
                "task_message_starts": {},
                "nudge_count": 0,
            }
        updates: dict[str, Any] | None = super().before_agent(state, runtime)
        return updates

    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command[Any]:
        """Steer as the library does; a call it answers without running the tool (outside
        the active step, a second step started, a completion its validator rejects) is
        reported ``DECLINED``, with the refusal the model gets."""
        ran = False

        async def tracked(inner: ToolCallRequest) -> ToolMessage | Command[Any]:
            nonlocal ran
            ran = True
            return await handler(inner)

        result: ToolMessage | Command[Any] = await super().awrap_tool_call(request, tracked)
        if not ran and isinstance(result, ToolMessage):
            call = request.tool_call
            report_tool_change(
                ToolChange(
                    str(call.get("id") or ""),
                    call["name"],
                    WorkStatus.DECLINED,
                    canonical_arguments(call.get("args", {})),
                    None,
                    result.text,
                )
            )
        return result

    @hook_config(can_jump_to=["model"])
    def after_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Nudge as the library does, unless a safeguard halted the run: a halt is final
        (a nudge would send a halted agent back to the model)."""
        if halt_in(state, _task_id()) is not None:
            return None
        updates: dict[str, Any] | None = super().after_agent(state, runtime)
        if updates is None:
            incomplete = self._incomplete(state)
            if incomplete:
                # Nudged as often as allowed: the agent may finish, and the caller is told.
                report_notice(
                    f"the agent finished with required pipeline steps incomplete "
                    f"({', '.join(incomplete)}) after {self._max_nudges} nudge(s)"
                )
        return updates

    def _incomplete(self, state: Any) -> list[str]:
        statuses = state.get("task_statuses") or {}
        done = {StepStatus.COMPLETE.value, "aborted"}
        return [name for name in self._required if statuses.get(name) not in done]

    @hook_config(can_jump_to=["model"])
    async def aafter_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.after_agent(state, runtime)


def pipeline_middleware(
    pipeline: Pipeline, tools: Mapping[str, BaseTool]
) -> Sequence[AgentMiddleware[Any, Any, Any]]:
    """The steering middleware of ``pipeline`` over the worker's built ``tools``."""
    missing = [name for name in sorted(pipeline.scoped_tools()) if name not in tools]
    if missing:
        raise ProfileError(f"the pipeline names tools the worker did not build: {missing}")
    tasks = [
        Task(
            name=step.name,
            instruction=step.instruction,
            tools=[tools[name] for name in step.tools],
            middleware=None
            if step.validator is None
            else _StepValidator(step, load_validator(step.validator)),
        )
        for step in pipeline.steps
    ]
    # A tool no step names is visible in every step (the built-in question tool too).
    in_steps = {name for step in pipeline.steps for name in step.tools}
    global_tools = [tool for name, tool in tools.items() if name not in in_steps]
    return [PipelineSteering(pipeline, tasks, global_tools)]


__all__ = [
    "PipelineState",
    "PipelineSteering",
    "StepCompletion",
    "load_validator",
    "pipeline_middleware",
]
