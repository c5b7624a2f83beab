"""Read-only views of sessions, tasks and the pool, read from the records in Redis.

These are what the HTTP API answers with and what an operator's tool shows: plain frozen
records, decoded once, with ``None`` wherever the records do not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from agent_harness_protocol import AgentUsage, InteractionRequest, TaskOutcome, TaskState

from wire.codec import RemoteCause, loads, outcome_from_json, usage_from_json
from wire.interactions import InteractionPayload
from wire.presence import QueueGauge, WorkerPresence
from wire.records import SessionField, TaskField, TerminalEntryField
from wire.statistics import TaskStatistics

from .errors import RemoteTaskError


@dataclass(frozen=True, slots=True)
class SessionInfo:
    id: str
    tenant: str
    persistent: bool
    closed: bool
    active_task: str | None
    """The session's unsettled (or last) task, if any."""
    queued_tasks: tuple[str, ...]
    """Tasks waiting behind the active one, in the order they will run."""
    turns: int
    usage: AgentUsage | None
    """Cumulative usage; ``None`` when nothing measured it."""
    profile: str


@dataclass(frozen=True, slots=True)
class TaskInfo:
    id: str
    session_id: str
    tenant: str
    state: TaskState
    outcome: TaskOutcome | None
    """The settled outcome; ``None`` until the task is terminal."""
    queued: bool
    """Waiting behind its session's running task, or parked (below)."""
    cancel_requested: bool
    deliveries: int
    created_at: datetime | None
    claimed_at: datetime | None
    """The latest claim by a worker."""
    settled_at: datetime | None
    pending_interactions: tuple[InteractionRequest, ...] = ()
    """What the task waits for its caller to answer (approvals, questions)."""
    parked: bool = False
    """Waiting for its tenant's running limit (docs/tenants.md)."""


@dataclass(frozen=True, slots=True)
class TaskMetrics:
    """The pool's task figures, for Prometheus (``harness.api``) or an operator."""

    statistics: TaskStatistics
    starting: int
    """Started and not yet claimed by a worker (queued ones not included)."""
    running: int
    """Claimed by a worker and not settled."""
    queue_depth: int | None
    """Run messages waiting at the broker; ``None`` when the broker is another Redis."""
    queues: tuple[QueueGauge, ...] = ()
    """Per queue (the deployment's and every live worker's): waiting, in flight, free."""
    workers: tuple[WorkerPresence, ...] = ()
    """The live worker processes, as they last reported themselves."""


def _remote(cause: RemoteCause) -> RemoteTaskError:
    return RemoteTaskError(cause.type_name, cause.module, cause.message)


@dataclass(frozen=True, slots=True)
class SettledView:
    """What a task's terminal stream entry says of its settled record (one step wrote
    both, and a settled record no longer changes)."""

    claimed_at: datetime | None
    settled_at: datetime
    cancel_requested: bool


def settled_view(fields: Mapping[str, str]) -> SettledView | None:
    """The settled view a terminal entry carries (``None`` if it carries none)."""
    settled = _time(fields.get(TerminalEntryField.SETTLED_MS))
    if settled is None:
        return None
    return SettledView(
        claimed_at=_time(fields.get(TerminalEntryField.CLAIMED_MS)),
        settled_at=settled,
        cancel_requested=fields.get(TerminalEntryField.CANCEL) == "1",
    )


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)


def session_info(
    session_id: str, record: Mapping[str, str], queued: tuple[str, ...]
) -> SessionInfo:
    usage_json = record.get(SessionField.USAGE, "")
    usage = usage_from_json(loads(usage_json)) if usage_json else None
    return SessionInfo(
        id=session_id,
        tenant=record.get(SessionField.TENANT, ""),
        persistent=record.get(SessionField.PERSISTENT) == "1",
        closed=record.get(SessionField.CLOSED) == "1",
        active_task=record.get(SessionField.ACTIVE) or None,
        queued_tasks=queued,
        turns=int(record.get(SessionField.TURNS, "0") or "0"),
        usage=usage,
        profile=record.get(SessionField.PROFILE, ""),
    )


def pending_requests(
    raised: Mapping[str, str], resolved: Mapping[str, str]
) -> tuple[InteractionRequest, ...]:
    """The requests of a task's interactions (``Keys.interactions``) that have no
    resolution yet (``Keys.responses``)."""
    return tuple(
        InteractionPayload.from_json(payload).to_request()
        for key, payload in raised.items()
        if key not in resolved
    )


def task_info(
    task_id: str,
    record: Mapping[str, str],
    pending: tuple[InteractionRequest, ...] = (),
) -> TaskInfo:
    outcome_json = record.get(TaskField.OUTCOME, "")
    return TaskInfo(
        id=task_id,
        session_id=record.get(TaskField.SESSION, ""),
        tenant=record.get(TaskField.TENANT, ""),
        state=TaskState(record.get(TaskField.STATE, TaskState.STARTING.value)),
        outcome=outcome_from_json(loads(outcome_json), _remote) if outcome_json else None,
        queued=record.get(TaskField.QUEUED) == "1" or record.get(TaskField.PARKED) == "1",
        cancel_requested=record.get(TaskField.CANCEL) == "1",
        deliveries=int(record.get(TaskField.DELIVERIES, "0") or "0"),
        created_at=_time(record.get(TaskField.CREATED_MS)),
        claimed_at=_time(record.get(TaskField.CLAIMED_MS)),
        settled_at=_time(record.get(TaskField.SETTLED_MS)),
        pending_interactions=pending,
        parked=record.get(TaskField.PARKED) == "1",
    )


__all__ = [
    "SessionInfo",
    "SettledView",
    "TaskInfo",
    "TaskMetrics",
    "pending_requests",
    "session_info",
    "settled_view",
    "task_info",
]
