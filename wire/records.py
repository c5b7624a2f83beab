"""The shapes of the two Redis hash records, defined once for both sides.

A task record (``Keys.task(task_id)``) and a session record (``Keys.session(session_id)``)
are Redis hashes whose field names are the members of :class:`TaskField` and
:class:`SessionField`. Python code on either side (caller, worker, sweeper, tests) spells a
field only through these enums. The Lua scripts in ``wire/lua/`` use the same names as
string literals (a script cannot import Python); ``tests/test_records.py`` checks that every
field a script reads or writes with ``HGET``, ``HMGET``, ``HSET``, ``HSETNX``, ``HDEL``,
``HEXISTS`` or ``HINCRBY`` is a member of one of the enums, so the two cannot drift.

Every value is a string (Redis hashes hold strings): flags are ``"1"`` / ``"0"``, counts
decimal integers, JSON documents encoded by ``wire.codec``.
"""

from __future__ import annotations

from enum import StrEnum


class TaskField(StrEnum):
    """Fields of a task record (``Keys.task``): one AHP task, from its start to its retention
    TTL after it settled."""

    SESSION = "session"
    """The id of the task's session. Written by ``start_task.lua`` (caller)."""
    STATE = "state"
    """The task's ``TaskState`` value: ``starting`` (caller's start), ``running`` (a worker's
    claim), then a terminal state written once by the settle helper of ``_prelude.lua``."""
    INPUT = "input"
    """The task input as codec JSON (``{"text": ..., "output_schema"?: ...}``, see
    ``wire.codec.task_input_to_json``). Written by ``start_task.lua``; read by the worker's
    run."""
    DELIVERIES = "deliveries"
    """How many times a worker claimed the task, less the graceful hand-backs (only lost
    deliveries count against ``max_deliveries``). Written by ``start_task.lua`` (0),
    ``claim.lua`` (+1) and ``hand_back.lua`` (-1)."""
    PUBLISHED = "published"
    """``"1"`` once the caller saw the run message's publish return (``confirm_start.lua``)
    or the sweeper found the message at the broker (``recover_starting.lua``); ``"0"`` from
    the start. Only a published start is ever republished."""
    FENCE = "fence"
    """The fencing token of the claim now holding the task (``claim.lua``)."""
    CLAIMED_MS = "claimed_ms"
    """Redis time (ms) of the latest claim (``claim.lua``)."""
    CANCEL = "cancel"
    """``"1"`` once cancellation was requested (``cancel.lua``, caller); read by the worker
    at every step boundary and by its lease renewal."""
    HANDED_BACK = "handed_back"
    """``"1"`` while a stopping worker's unsettled run is handed back (``hand_back.lua``);
    the next claim resumes it without counting a lost delivery and deletes the field."""
    RECOVER_AT = "recover_at"
    """Redis time (ms) before which the sweeper does not republish the task again
    (``recover.lua``, ``recover_starting.lua``); deleted by a claim."""
    RECOVERIES = "recoveries"
    """How many times the sweeper republished the running task (``recover.lua``)."""
    PARTIAL = "partial"
    """Answer text appended so far by the current run (``append.lua``): the partial output
    an outcome settled without the worker keeps. Deleted by a claim."""
    APPENDED = "appended"
    """The run and batch number of the last event batch appended (``append.lua``), so a
    resent batch is not appended twice."""
    TENANT = "tenant"
    """The tenant owning the task's session, copied by ``start_task.lua`` ('' for none):
    the API answers another tenant as if the task did not exist, also after the session
    record is gone."""
    CREATED_MS = "created_ms"
    """Redis time (ms) of the start (``start_task.lua``)."""
    SETTLED_MS = "settled_ms"
    """Redis time (ms) of the settle (the settle helper of ``_prelude.lua``)."""
    QUEUED = "queued"
    """``"1"`` while the task waits in its session's queue (``start_task.lua`` with the
    ``enqueue`` strategy); deleted when ``promote()`` starts it or it settles."""
    PARKED = "parked"
    """``"1"`` while the task waits for its tenant's running limit, with no run message
    (``start_task.lua``, ``promote()``); deleted when ``dispatch_parked()`` admits it or
    it settles (docs/tenants.md)."""
    ADMITTED = "admitted"
    """``"1"`` once the task counts against its tenant's running limit (a member of
    ``Keys.tenant_admitted``); the settle removes it from that set."""
    ADOPTED = "adopted"
    """Redis time (ms) at which a retry with the start's ``Idempotency-Key`` found it
    never published and took its publish over (``start_task.lua``); a retry that could
    not deliver it deletes the field again."""
    QUEUE = "queue"
    """The broker queue the task was started on (``start_task.lua``). Every later
    message of the task goes there: the sweeper's republish, a resume, a promotion; a
    worker's sweeper looks only at unclaimed starts of the queue it serves ('' on a
    record written before the field existed: any queue's)."""
    IDEMPOTENCY = "idempotency"
    """The key of the ``Idempotency-Key`` record that started the task (``start_task.lua``),
    deleted with the task by a rollback."""
    AWAITING = "awaiting"
    """The id of the interaction the paused task waits for (``pause.lua``, worker); the
    task's state is then ``awaiting_response``. Deleted by the claim that resumes it."""
    RESUME = "resume"
    """``"1"`` once the awaited interaction was answered and the task is due for a resume
    run (``respond.lua``, caller); its run message is published by the caller, or again by
    the sweeper (the task is in the starting set). Deleted by the claim that resumes it."""
    PAUSED_USAGE = "paused_usage"
    """The usage (codec JSON) the task's runs measured before it paused (``pause.lua``):
    the usage of an outcome settled while it waits, and the base of the resumed run's."""
    TRACE = "trace"
    """The task's W3C trace context as JSON (``{"traceparent": ..., "tracestate": ...}``,
    ``wire.tracing_context``), written by ``record_trace.lua`` (caller) right after the
    start when the caller traces; absent otherwise. Every later run message of the task
    (resume, promotion, republish) carries it, so its runs continue the start's trace."""
    OUTCOME = "outcome"
    """The settled outcome as codec JSON, written once with the terminal ``state`` by the
    settle helper of ``_prelude.lua`` (worker, caller, sweeper or claim)."""


class SessionField(StrEnum):
    """Fields of a session record (``Keys.session``): one AHP session (one checkpoint
    thread), from ``create_session`` until it is released and forgotten."""

    SPEC = "spec"
    """The ``SessionSpec`` as codec JSON. Written by ``create_session`` (caller), replaced by
    ``reopen.lua``; read by the worker's run."""
    PROFILE = "profile"
    """The name of the agent profile the session was created under (caller)."""
    PROFILE_DIGEST = "profile_digest"
    """The digest of that profile's declaration: a worker whose declaration differs refuses
    to run the session (caller)."""
    PERSISTENT = "persistent"
    """``"1"`` for a persistent session (kept after release, reopenable), else ``"0"``."""
    ACTIVE = "active"
    """The id of the session's unsettled task, or ``""``. Written by ``start_task.lua``;
    cleared when that task settles, is rolled back or the run releases the session."""
    CLOSED = "closed"
    """``"1"`` once the session was released (``release_session.lua``); no task starts and
    no claim runs after it. ``"0"`` from ``create_session``."""
    TURNS = "turns"
    """Completed turns (tasks settled ``Completed``), counted by the settle helper."""
    USAGE = "usage"
    """Cumulative ``AgentUsage`` as codec JSON; written by ``create_session`` (zero) and the
    settle helper, which commits each task's usage once."""
    METADATA = "metadata"
    """The harness's run-metadata labels as JSON (``create_session``); passed to every graph
    run's LangChain config."""
    TENANT = "tenant"
    """The tenant owning the session ('' for none), written by ``create_session``: only
    its tenant sees the session and its tasks through the HTTP API."""
    SINGLE = "single"
    """``"1"`` for a single-task session (``create_session(single_task=True)``): it takes
    one task, and the step that settles that task forgets the session and queues the
    deletion of its checkpoint thread (``end_single_task_session`` in the Lua prelude).
    Absent otherwise."""
    BLOCKED = "blocked"
    """The task id of an unconfirmed start (``block_unconfirmed.lua``): while set, no handle
    starts another task of the session."""


__all__ = ["SessionField", "TaskField"]


class TerminalEntryField(StrEnum):
    """Fields of a task stream's terminal entry (``Keys.events``) beyond the event's own
    (``k``, ``t``, ``d``): the task record's settled view, written by the settle helper of
    ``_prelude.lua`` in the same step as the record, so a reader of the stream knows the
    settled record without reading it."""

    SETTLED_MS = "settled_ms"
    """The record's ``settled_ms``."""
    CLAIMED_MS = "claimed_ms"
    """The record's ``claimed_ms`` ('' if no worker ever claimed the task)."""
    CANCEL = "cancel"
    """The record's ``cancel`` flag ('1', or '' if cancellation was never requested)."""
