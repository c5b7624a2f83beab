"""Safeguards (seed 001) as agent middleware, their counters in the checkpointed state.

Per task (the counters start over when the thread's run belongs to another task):

- step limit: before a model call, a task that already made ``max_steps`` calls halts
  with ``ITERATION_LIMIT``;
- repeated action: after a model call, a tool action (name and canonical arguments,
  hashed) already seen ``loop_repeats - 1`` times among the task's last ``loop_window``
  actions halts with ``LOOP_DETECTED`` before it runs again;
- token budget: after a model call, measured tokens over ``token_budget`` halt with
  ``BUDGET_EXCEEDED``; so does a call that reports no usage (the budget cannot be
  enforced past it: fail closed).

The counters live in the graph state under ``ahp_guard``, so the checkpoint carries them:
a run resumed on another worker (or after an approval) keeps counting where it was. A
halt is written there too (the resume path reads it back) and reported on the custom
stream. A halted model message's tool calls are answered with "not run" tool messages,
so the thread stays valid for the session's next task.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, NotRequired

from agent_harness_protocol import (
    AgentUsage,
    Completed,
    Failed,
    FailureKind,
    StopReason,
    TaskId,
    TaskOutcome,
    TextOutput,
)
from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime

from wire.profiles import Safeguards

from .middleware import TOKEN_BUDGET, run_key
from .stream_items import Halt, HaltReason, canonical_arguments, report_halt
from .usage import measured_tokens

GUARD = "ahp_guard"

_HALT_STOP = {
    HaltReason.ITERATION_LIMIT: StopReason.ITERATION_LIMIT,
    HaltReason.LOOP_DETECTED: StopReason.LOOP_DETECTED,
}


def halted_outcome(task: TaskId, halt: Halt, text: str | None, usage: AgentUsage) -> TaskOutcome:
    """The outcome of a run a safeguard halted: the step limit and repeated actions
    complete with their stop reason, the token budget fails ``BUDGET_EXCEEDED``; the text
    the model had written is a partial output."""
    partial = None if text is None else TextOutput(text, complete=False)
    if halt.reason is HaltReason.BUDGET_EXCEEDED:
        return Failed(task, FailureKind.BUDGET_EXCEEDED, halt.detail, output=partial, usage=usage)
    return Completed(task, _HALT_STOP[halt.reason], partial, usage)


class GuardState(AgentState[Any]):
    ahp_guard: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]


def _fresh(task: str) -> dict[str, Any]:
    return {"task": task, "steps": 0, "tokens": 0, "actions": [], "halt": None}


def guard_of(state: Any, task: str) -> dict[str, Any]:
    """The task's counters in ``state`` (fresh ones if the state holds another task's)."""
    guard = state.get(GUARD) if isinstance(state, dict) else None
    if not isinstance(guard, dict) or guard.get("task") != task:
        return _fresh(task)
    return dict(guard)


def halt_in(state: Any, task: str) -> Halt | None:
    """The halt recorded for ``task`` in a (checkpointed) state, if any."""
    halt = guard_of(state, task).get("halt")
    return Halt.from_json(halt) if isinstance(halt, dict) else None


def action_hash(name: str, arguments: dict[str, Any]) -> str:
    canonical = f"{name}\n{canonical_arguments(arguments)}"
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _not_run(message: AIMessage, why: str) -> list[AnyMessage]:
    return [
        ToolMessage(
            content=f"not run: {why}",
            tool_call_id=str(call["id"]),
            name=call["name"],
            status="error",
        )
        for call in message.tool_calls
    ]


def _budget(profile_budget: int | None) -> int | None:
    """The profile's budget, or the run's narrowed one when smaller."""
    narrowed = get_config().get("configurable", {}).get(TOKEN_BUDGET)
    budgets = [b for b in (profile_budget, narrowed) if isinstance(b, int)]
    return min(budgets) if budgets else None


class SafeguardMiddleware(AgentMiddleware[GuardState, Any, Any]):
    state_schema = GuardState

    def __init__(self, safeguards: Safeguards) -> None:
        super().__init__()
        self._limits = safeguards

    def _halt(
        self, guard: dict[str, Any], halt: Halt, messages: list[AnyMessage]
    ) -> dict[str, Any]:
        guard["halt"] = halt.to_json()
        report_halt(halt)
        return {GUARD: guard, "messages": messages, "jump_to": "end"}

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: GuardState, runtime: Runtime[Any]) -> dict[str, Any]:
        guard = guard_of(state, run_key(get_config()))
        limit = self._limits.max_steps
        if limit is not None and guard["steps"] >= limit:
            halt = Halt(
                HaltReason.ITERATION_LIMIT, f"the task reached its limit of {limit} model calls"
            )
            return self._halt(guard, halt, [])
        guard["steps"] += 1
        return {GUARD: guard}

    @hook_config(can_jump_to=["end"])
    async def aafter_model(self, state: GuardState, runtime: Runtime[Any]) -> dict[str, Any]:
        guard = guard_of(state, run_key(get_config()))
        last = state["messages"][-1] if state["messages"] else None
        if not isinstance(last, AIMessage):
            return {GUARD: guard}
        tokens = measured_tokens(last)
        used = guard["tokens"]
        guard["tokens"] = None if tokens is None or used is None else used + tokens
        budget = _budget(self._limits.token_budget)
        if budget is not None and (guard["tokens"] is None or guard["tokens"] > budget):
            detail = (
                f"the task used {guard['tokens']} tokens, over its budget of {budget}"
                if guard["tokens"] is not None
                else f"a model call reported no token usage: the budget of {budget} tokens "
                "cannot be enforced"
            )
            halt = Halt(HaltReason.BUDGET_EXCEEDED, detail)
            return self._halt(guard, halt, _not_run(last, "the token budget is exhausted"))
        repeats = self._limits.loop_repeats
        actions: list[str] = list(guard["actions"])
        for call in last.tool_calls:
            action = action_hash(call["name"], call["args"])
            window = self._limits.loop_window - 1
            recent = actions[-window:] if window > 0 else []
            if repeats is not None and recent.count(action) + 1 >= repeats:
                halt = Halt(
                    HaltReason.LOOP_DETECTED,
                    f"{call['name']} was called {repeats} times with the same arguments "
                    f"within {self._limits.loop_window} actions",
                )
                guard["actions"] = actions
                return self._halt(guard, halt, _not_run(last, "repeated action"))
            actions.append(action)
        guard["actions"] = actions[-self._limits.loop_window :]
        return {GUARD: guard}
