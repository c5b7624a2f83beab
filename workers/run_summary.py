"""What the Celery task of a run message returns: the AHP outcome, for Flower.

Celery reports every delivery whose task function returned as ``SUCCESS``, whatever the
AHP task's outcome: a cancelled, failed or unresolved AHP task is a delivery that did its
job. So the task function returns a small summary of the task record as it stands when
the delivery ends, and the worker's ``task-succeeded`` event carries it (Celery sends the
``repr`` of the return value; no result backend is involved). Flower shows it in the
Result column and in ``/api/tasks``::

    {'ahp_task_id': 't-1', 'ahp_state': 'cancelled', 'ahp_outcome': 'cancelled',
     'usage': {'input_tokens': 0, ...}}

Only ids, enum values and token counts: never the input, the output text or a failure
message (either may hold user content). ``None`` means unknown, as everywhere: an
``ahp_outcome`` of ``None`` says the task was not settled when this delivery ended (it
runs under another delivery, its lease was taken over, or the record could not be read).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agent_harness_protocol import (
    AgentUsage,
    Cancelled,
    Completed,
    Failed,
    TaskOutcome,
    Unresolved,
)
from redis.exceptions import RedisError

from wire.codec import loads, outcome_from_json
from wire.errors import DecodeError
from wire.records import TaskField
from wire.store import RecordStore
from wire.usage import USAGE_FIELDS

log = logging.getLogger(__name__)

_KIND = {
    Completed: "completed",
    Failed: "failed",
    Cancelled: "cancelled",
    Unresolved: "unresolved",
}


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A task record's state and settled outcome, reduced to ids, enums and counts."""

    task_id: str
    state: str | None = None
    """The record's ``TaskState`` value; ``None``: no record, or unreadable."""
    outcome: TaskOutcome | None = None
    """The settled outcome; ``None``: not settled (yet), or unreadable."""

    def to_json(self) -> dict[str, Any]:
        """The JSON-safe summary the task function returns."""
        outcome = self.outcome
        data: dict[str, Any] = {
            "ahp_task_id": self.task_id,
            "ahp_state": self.state,
            "ahp_outcome": None if outcome is None else _KIND[type(outcome)],
        }
        if isinstance(outcome, Completed):
            data["stop_reason"] = outcome.stop_reason.value
        elif isinstance(outcome, Failed):
            data["failure_kind"] = outcome.kind.value
        elif isinstance(outcome, Unresolved):
            data["reason"] = outcome.reason.value
        if outcome is not None:
            data["usage"] = _usage(outcome.usage)
        return data


def _usage(usage: AgentUsage) -> dict[str, int | None]:
    return {name: getattr(usage, name) for name in USAGE_FIELDS}


def summary_from_fields(task_id: str, state: str | None, outcome: str | None) -> RunSummary:
    """The summary of a record's ``state`` and ``outcome`` fields (either may be missing).

    An outcome that does not decode is reported as unknown, never guessed."""
    decoded: TaskOutcome | None = None
    if outcome:
        try:
            decoded = outcome_from_json(loads(outcome))
        except (DecodeError, KeyError, TypeError, ValueError) as error:
            log.warning("task %s: stored outcome not readable (%s)", task_id, error)
    return RunSummary(task_id, state or None, decoded)


async def read_summary(store: RecordStore, task_id: str) -> RunSummary:
    """The summary of the task's record now (one ``HMGET``). A Redis error yields an
    all-unknown summary: the delivery has done its work, and reporting must not make
    Celery hand the message back."""
    try:
        state, outcome = await store.redis.hmget(
            store.keys.task(task_id), [TaskField.STATE.value, TaskField.OUTCOME.value]
        )
    except RedisError as error:
        log.warning("task %s: record not readable for the run summary (%s)", task_id, error)
        return RunSummary(task_id)
    return summary_from_fields(task_id, _text(state), _text(outcome))


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


__all__ = ["RunSummary", "read_summary", "summary_from_fields"]
