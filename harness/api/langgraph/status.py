"""A run's and a thread's LangGraph status, from the AHP task state and outcome.

| AHP | run status |
|---|---|
| queued behind another task, or started and not yet claimed | ``pending`` |
| claimed, running | ``running`` |
| the run ended at an approval or question (the task awaits a response) | ``success`` |
| ``Completed`` | ``success`` |
| ``Failed`` | ``error`` |
| ``Cancelled`` | ``interrupted`` |
| ``Unresolved`` | ``error``: whether it did its work is not known, never ``success`` |

A run that ended at an interrupt is ``success`` as in LangGraph: its thread is
``interrupted``, and the resume is a new run of the same task. No AHP outcome maps to
``timeout``.
"""

from __future__ import annotations

from enum import StrEnum

from agent_harness_protocol import (
    Cancelled,
    Completed,
    Failed,
    TaskOutcome,
    TaskState,
    Unresolved,
)

from harness.info import TaskInfo


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCESS = "success"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    TIMEOUT = "timeout"


class ThreadStatus(StrEnum):
    IDLE = "idle"
    BUSY = "busy"
    INTERRUPTED = "interrupted"
    ERROR = "error"


def outcome_status(outcome: TaskOutcome) -> RunStatus:
    if isinstance(outcome, Completed):
        return RunStatus.SUCCESS
    if isinstance(outcome, Cancelled):
        return RunStatus.INTERRUPTED
    assert isinstance(outcome, Failed | Unresolved)
    return RunStatus.ERROR


def task_status(info: TaskInfo, *, ended_at_interrupt: bool) -> RunStatus:
    """The status of a run of the task ``info`` describes."""
    if info.outcome is not None:
        return outcome_status(info.outcome)
    if ended_at_interrupt or info.state is TaskState.AWAITING_RESPONSE:
        return RunStatus.SUCCESS
    if info.queued or info.state is TaskState.STARTING:
        return RunStatus.PENDING
    return RunStatus.RUNNING


def thread_status(info: TaskInfo | None) -> ThreadStatus:
    """A thread's status from its latest task (``None``: it has run nothing)."""
    if info is None:
        return ThreadStatus.IDLE
    if info.state is TaskState.AWAITING_RESPONSE:
        return ThreadStatus.INTERRUPTED
    if not info.state.is_terminal:
        return ThreadStatus.BUSY
    if isinstance(info.outcome, Failed | Unresolved):
        return ThreadStatus.ERROR
    return ThreadStatus.IDLE


def error_of(outcome: TaskOutcome | None) -> dict[str, str] | None:
    """The ``error`` event's data for an outcome that is not a success."""
    if isinstance(outcome, Failed):
        return {"error": f"Failed.{outcome.kind.value}", "message": outcome.message}
    if isinstance(outcome, Unresolved):
        return {
            "error": f"Unresolved.{outcome.reason.value}",
            "message": "whether the run did its work is not known: "
            + (outcome.known or outcome.reason.value),
        }
    return None


__all__ = [
    "RunStatus",
    "ThreadStatus",
    "error_of",
    "outcome_status",
    "task_status",
    "thread_status",
]
