"""Dead letters: work the deployment gave up on, kept where an operator finds it.

Two kinds (:class:`DeadLetterKind`), each recorded in the same atomic step that gives the
work up, so no crash can settle one without the other:

* ``max_deliveries``: a task settled ``Failed`` because its worker was lost
  ``AHP_MAX_DELIVERIES`` times (``claim.lua``, in the step that settles it);
* ``malformed``: a message a worker took from its queue and dropped because it was not a
  run message of the deployment (``dead_letter.lua``, called by ``workers.intake``; it
  also counts ``Keys.malformed_messages``). Only its id and a short cause are kept, never
  its body or headers.

Each is one entry of the stream ``Keys.dead_letters`` (fields: :class:`DeadLetterField`;
the entry id is the time it was recorded) and one count in ``Keys.dead_letter_counts``.
The recording step trims the stream to the last ``AHP_TASK_RETENTION`` and at most
:data:`DEAD_LETTERS_KEPT` entries and gives it the retention as TTL; a reader shows only
entries younger than the retention, so nothing older is ever listed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from redis.asyncio import Redis

from .keys import Keys
from .store_results import reply_text

DEAD_LETTERS_KEPT = 10_000
"""The most entries the dead-letter stream holds (older ones are trimmed first)."""
CAUSE_LENGTH = 240
"""A cause is cut to this many characters."""
_CHUNK = 500


class DeadLetterKind(StrEnum):
    MAX_DELIVERIES = "max_deliveries"
    """A task settled ``Failed``: its worker was lost ``AHP_MAX_DELIVERIES`` times."""
    MALFORMED = "malformed"
    """A message dropped from the queue: not a run message of this deployment."""


class DeadLetterField(StrEnum):
    """Fields of a dead-letter stream entry (the Lua helper ``_dead_letters.lua`` writes
    the same names)."""

    KIND = "kind"
    TASK = "task"
    """The task id ('' for a malformed message)."""
    SESSION = "session"
    """The task's session id ('' for a malformed message)."""
    TENANT = "tenant"
    """The tenant owning the task ('' for none, and for every malformed message)."""
    QUEUE = "queue"
    """The broker queue the task was started on, or the message was taken from."""
    MESSAGE = "message"
    """The broker message id (Celery's task id: the AHP task id for a run message); ''
    when a malformed item carried none."""
    CAUSE = "cause"
    """Why the work was given up, in words (never the message's content)."""


class DeadLetter(BaseModel):
    """One piece of work given up: a task failed after its worker was lost
    ``AHP_MAX_DELIVERIES`` times, or a malformed message dropped from the queue. The one
    declaration of the record: the HTTP API's body and the CLI's JSON lines are it."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="The entry's id; pass it as ``before`` for older entries.")
    kind: DeadLetterKind = Field(
        description="``max_deliveries``: the task was settled ``failed`` after its worker was "
        "lost that many times; ``malformed``: a message on the queue that was not a run "
        "message of this deployment was dropped (only its id is kept, never its content)."
    )
    at: datetime = Field(description="When it was given up (Redis time, UTC).")
    task_id: str | None = Field(description="The task (``null`` for a malformed message).")
    session_id: str | None = Field(description="The task's session (``null`` if malformed).")
    tenant: str | None = Field(description="The tenant owning the task (``null``: none).")
    queue: str | None = Field(description="The broker queue of the task or the message.")
    message_id: str | None = Field(
        description="The broker message id (Celery's task id; for a run message the task "
        "id); ``null`` when the dropped item carried none."
    )
    cause: str = Field(description="Why it was given up, in words.")


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    letters: tuple[DeadLetter, ...]
    """Newest first."""
    next_before: str | None
    """Pass as ``before`` for the next (older) page; ``None``: nothing older."""


def _entry_ms(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


def dead_letter_from_entry(entry_id: str, fields: Mapping[str, str]) -> DeadLetter | None:
    """The entry as a record; ``None`` for an entry of a kind this version does not know."""
    try:
        kind = DeadLetterKind(fields.get(DeadLetterField.KIND, ""))
    except ValueError:
        return None

    def optional(field: DeadLetterField) -> str | None:
        return fields.get(field) or None

    return DeadLetter(
        id=entry_id,
        kind=kind,
        at=datetime.fromtimestamp(_entry_ms(entry_id) / 1000, UTC),
        task_id=optional(DeadLetterField.TASK),
        session_id=optional(DeadLetterField.SESSION),
        tenant=optional(DeadLetterField.TENANT),
        queue=optional(DeadLetterField.QUEUE),
        message_id=optional(DeadLetterField.MESSAGE),
        cause=fields.get(DeadLetterField.CAUSE, ""),
    )


def retention_ms(retention: timedelta) -> int:
    return int(retention.total_seconds() * 1000)


async def read_dead_letters(
    redis: Redis,
    keys: Keys,
    retention: timedelta,
    *,
    tenant: str | None = None,
    kind: DeadLetterKind | None = None,
    limit: int = 100,
    before: str | None = None,
) -> DeadLetterPage:
    """The dead letters younger than ``retention``, newest first: every one, or only
    those of ``tenant`` (a malformed message has no tenant) and of ``kind``, at most
    ``limit``, older than the entry ``before``. Redis errors propagate."""
    seconds, micros = await redis.time()
    oldest = int(seconds) * 1000 + int(micros) // 1000 - retention_ms(retention)
    found: list[DeadLetter] = []
    if before is not None and tuple(int(part) for part in before.split("-")) == (0, 0):
        return DeadLetterPage((), None)  # nothing is older (and Redis refuses "(0-0")
    upper = f"({before}" if before else "+"
    while True:
        chunk: Sequence[tuple[Any, Any]] = (
            await redis.xrevrange(keys.dead_letters(), upper, f"{max(oldest, 0)}-0", count=_CHUNK)
            or []
        )
        for raw_id, raw_fields in chunk:
            entry_id = reply_text(raw_id)
            fields = {
                reply_text(name): reply_text(value) for name, value in (raw_fields or {}).items()
            }
            letter = dead_letter_from_entry(entry_id, fields)
            if letter is None or (kind is not None and letter.kind is not kind):
                continue
            if tenant is not None and letter.tenant != tenant:
                continue
            if len(found) == limit:
                return DeadLetterPage(tuple(found), found[-1].id)
            found.append(letter)
        if len(chunk) < _CHUNK:
            return DeadLetterPage(tuple(found), None)
        upper = f"({reply_text(chunk[-1][0])}"


async def dead_letter_counts(redis: Redis, keys: Keys) -> dict[DeadLetterKind, int]:
    """How many dead letters of each kind were recorded since the deployment began (every
    kind present, 0 if never); a kind this version does not know is left out."""
    raw = await redis.hgetall(keys.dead_letter_counts())
    counts = dict.fromkeys(DeadLetterKind, 0)
    for name, value in raw.items():
        try:
            counts[DeadLetterKind(reply_text(name))] = int(reply_text(value))
        except ValueError:
            continue
    return counts


def malformed_call(
    keys: Keys, retention: timedelta, message_id: str | None, queue: str, cause: str
) -> tuple[list[str], list[str | int]]:
    """KEYS and ARGV of ``scripts.DEAD_LETTER`` for a dropped malformed message."""
    return (
        [keys.dead_letters(), keys.dead_letter_counts(), keys.malformed_messages()],
        [retention_ms(retention), DEAD_LETTERS_KEPT, message_id or "", queue, cause[:CAUSE_LENGTH]],
    )


__all__ = [
    "CAUSE_LENGTH",
    "DEAD_LETTERS_KEPT",
    "DeadLetter",
    "DeadLetterField",
    "DeadLetterKind",
    "DeadLetterPage",
    "dead_letter_counts",
    "dead_letter_from_entry",
    "malformed_call",
    "read_dead_letters",
    "retention_ms",
]
