"""What the atomic scripts answer, as typed results (``wire.store`` decodes the replies).

Each enum names the replies of one script (start, claim, recover, reopen, settle,
release, cancel, pause, respond); the dataclasses carry the replies with more than a
word (a claim's lease and records, a settlement's outcome and promoted task, what the
starting-set sweep found).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class StartResult(StrEnum):
    OK = "ok"
    """Started; detail: the Redis time of the start in ms (the record's ``created_ms``)."""
    QUEUED = "queued"
    """Queued behind the session's running task (``enqueue``); detail: as for ``OK``."""
    REPLAY = "replay"
    """The idempotency key started a task before; detail: that task's id."""
    ADOPTED = "adopted"
    """A replay whose first attempt never published its task (it died between recording
    and publishing): this caller publishes it, the only one to; detail: the task id."""
    REUSED = "reused"
    """The idempotency key started a task with another request; detail: that task's id."""
    UNKNOWN = "unknown"
    CLOSED = "closed"
    UNCONFIRMED = "unconfirmed"
    BUSY = "busy"
    OUTLIVED = "outlived"
    SPENT = "spent"
    """A single-task session has started its task; detail: that task's id."""
    PARKED = "parked"
    """Recorded, waiting for its tenant's running limit (no run message yet: the settle
    that frees the tenant a place admits it); detail: as for ``OK``."""
    RATE_LIMITED = "rate_limited"
    """Past the tenant's starts per second, nothing written; detail: milliseconds until
    a start is allowed."""
    QUEUE_FULL = "queue_full"
    """The tenant's queued limit is reached, nothing written; detail: its parked tasks."""


class ClaimResult(StrEnum):
    CLAIMED = "claimed"
    MISSING = "missing"
    TERMINAL = "terminal"
    BUSY = "busy"
    LOST = "lost"
    EXHAUSTED = "exhausted"
    RELEASED = "released"
    """The task's session was released and forgotten: settled without running."""
    CANCELLED = "cancelled"
    """A handed-back task whose cancellation was requested meanwhile: settled here."""
    WAITING = "waiting"
    """Paused for the caller and not answered yet: the message is dropped (the answer
    makes the task due and publishes its resume)."""


class RecoverResult(StrEnum):
    GONE = "gone"
    ALIVE = "alive"
    PENDING = "pending"
    LOST = "lost"
    REPUBLISH = "republish"


class ReopenResult(StrEnum):
    OK = "ok"
    UNKNOWN = "unknown"
    PROFILE = "profile"
    UNCONFIRMED = "unconfirmed"
    BUSY = "busy"
    OUTLIVED = "outlived"
    CONFIGURED = "configured"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class LossPolicy:
    """What a claim does with a task whose previous run lost its worker."""

    resume: bool
    max_deliveries: int
    lost_outcome: str
    """Outcome JSON (Unresolved, observation lost) used when the run may not resume."""
    exhausted_outcome: str
    """Outcome JSON (Failed) used when the task has been delivered ``max_deliveries`` times."""


class SettleResult(StrEnum):
    SETTLED = "settled"
    TERMINAL = "terminal"
    STALE = "stale"
    MISSING = "missing"


class ReleaseResult(StrEnum):
    FORGOTTEN = "forgotten"
    """The session's record, lease, fence and handle keys are gone."""
    CLOSED = "closed"
    """Closed (no task starts any more); a task of it is unsettled: stop it, then forget."""
    UNKNOWN = "unknown"


class StartingFate(StrEnum):
    """What the sweeper's look at an unclaimed start decided (``recover_starting.lua``)."""

    REPUBLISH = "republish"
    """Its message provably reached the broker and vanished unclaimed: publish it again."""
    SETTLED = "settled"
    """Never published, past the bound: settled Failed here (it never ran)."""
    PROMOTED = "promoted"
    """Started by that settle from its session's queue: publish it."""


@dataclass(frozen=True)
class StartingRecovery:
    fate: StartingFate
    task_id: str
    session_id: str


@dataclass(frozen=True)
class UnpublishedStarts:
    """When a start never published is given up, and the outcome it is settled with."""

    after_ms: int
    outcome: str
    """Failed outcome JSON; the script fills in the task id and measured-zero usage."""


class CancelResult(StrEnum):
    SETTLED = "settled"
    REQUESTED = "requested"
    TERMINAL = "terminal"
    MISSING = "missing"


class PauseResult(StrEnum):
    PAUSED = "paused"
    """The task awaits the caller; the run's lease is released."""
    STALE = "stale"
    TERMINAL = "terminal"
    CANCELLED = "cancelled"
    """Its cancellation was recorded: nothing was stored; the run settles Cancelled."""


class RespondResult(StrEnum):
    OK = "ok"
    """Recorded: the interaction is resolved by this response (exactly once); detail
    ``"1"`` when the task is now due for its resume run (publish it)."""
    MISSING = "missing"
    """No such task (never started, or its retention ended)."""
    TERMINAL = "terminal"
    CANCELLED = "cancelled"
    """The task's cancellation was requested: its pending interactions were cleared."""
    UNKNOWN = "unknown"
    """The task raised no interaction of this id."""
    RESOLVED = "resolved"
    """The interaction was resolved before (detail: that resolution's JSON)."""


HANDED_BACK = "handed_back"
AWAITING_RESPONSE = "awaiting_response"


@dataclass(frozen=True, slots=True)
class Claim:
    result: ClaimResult
    lease: str = ""
    previous_state: str = ""
    """The task's state before the claim; ``HANDED_BACK`` after a stopping worker's
    hand-back."""
    deliveries: int = 0
    task: Mapping[str, str] = field(default_factory=dict)
    session: Mapping[str, str] = field(default_factory=dict)


def claim_from_reply(reply: Any) -> Claim:
    """The claim script's reply as a :class:`Claim`."""
    result = ClaimResult(reply_text(reply[0]))
    if result is not ClaimResult.CLAIMED:
        return Claim(result)
    return Claim(
        result,
        reply_text(reply[1]),
        reply_text(reply[2]),
        int(reply[3]),
        _fields(reply[4]),
        _fields(reply[5]),
    )


@dataclass(frozen=True, slots=True)
class Settlement:
    result: SettleResult
    outcome: str = ""
    session_released: bool = False
    promoted: str = ""
    """The task this settle promoted from the session's queue: the settler publishes it."""


class BusyPolicy(StrEnum):
    """What a start does when its session has an unsettled task."""

    REJECT = "reject"
    """Refuse (``SessionBusyError``), the AHP default."""
    ENQUEUE = "enqueue"
    """Queue behind it; queued tasks run strictly in order, each when the one before
    settled (LangGraph's server calls this strategy ``enqueue``)."""


def _fields(flat: Any) -> dict[str, str]:
    items = [reply_text(item) for item in flat]
    return dict(zip(items[0::2], items[1::2], strict=True))


def reply_text(value: Any) -> str:
    """A Redis reply item as text (clients with or without ``decode_responses``; nil: "")."""
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


__all__ = [
    "AWAITING_RESPONSE",
    "HANDED_BACK",
    "BusyPolicy",
    "CancelResult",
    "Claim",
    "ClaimResult",
    "LossPolicy",
    "PauseResult",
    "RecoverResult",
    "ReleaseResult",
    "ReopenResult",
    "RespondResult",
    "SettleResult",
    "Settlement",
    "StartResult",
    "StartingFate",
    "StartingRecovery",
    "UnpublishedStarts",
    "claim_from_reply",
    "reply_text",
]
