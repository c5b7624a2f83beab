"""How a task handle follows its task's stream: every entry applied in order, once.

The handle subscribes to its task's stream key in its runtime's one stream reader
(``harness.stream_reader``) from the first entry; each read's entries update the
``state`` snapshot and the interactions, and go to the ``events()`` and ``diagnostics()``
subscribers and to relays that follow the raw reads (the HTTP API's event streams). A lost
connection is retried from the last entry applied; a stream that cannot be followed ends
the handle's observation (``Unresolved(OBSERVATION_LOST)``). The terminal entry, written by
the one atomic settle script, settles the handle with the outcome every reader sees.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from agent_harness_protocol import (
    DiagnosticEvent,
    DiagnosticGap,
    InteractionRequested,
    InteractionResolved,
    MessageDelta,
    MessageRole,
    TaskEvent,
    TaskId,
    TaskOutcome,
    TaskStarted,
    TaskState,
    TerminalEvent,
    TextOutput,
    Unresolved,
    UnresolvedReason,
    Warning,
    WarningKind,
)

from wire.codec import RemoteCause, loads
from wire.errors import DecodeError
from wire.event_codec import DIAGNOSTIC, INTERACTION_TAG, diagnostic_from_entry, event_from_entry
from wire.interactions import InteractionPayload

from .errors import RemoteTaskError
from .fanout import BoundedFanout
from .info import SettledView, settled_view
from .runtime import CallerRuntime
from .stream_reader import Follower, Mark, StreamEntry, Subscription
from .task_interactions import TaskInteractions

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StreamRead:
    """The entries one read of a task's stream returned, in order; or, with ``dropped``,
    how many reads a subscriber that fell behind missed (it must read them itself)."""

    entries: tuple[StreamEntry, ...]
    dropped: int = 0


def remote_cause(cause: RemoteCause) -> RemoteTaskError:
    return RemoteTaskError(cause.type_name, cause.module, cause.message)


class TaskStreamFollower:
    """The stream-following half of ``harness.task.CeleryTask`` (see the module
    docstring); the handle declares the state it shares here."""

    reconnect_window: float = 60.0
    """Seconds the stream reader keeps reconnecting to an unreachable Redis before this
    handle settles ``Unresolved(OBSERVATION_LOST)`` (read when the handle starts reading)."""

    _runtime: CallerRuntime
    _id: TaskId
    _state: TaskState
    _outcome: asyncio.Future[TaskOutcome]
    _events: BoundedFanout[TaskEvent]
    _diagnostics: BoundedFanout[DiagnosticEvent]
    _interactions: TaskInteractions
    _subscription: Subscription | None
    _reads: BoundedFanout[StreamRead] | None
    _settled_view: SettledView | None
    _last_entry: str
    _partial: list[str]

    def _finish(self, outcome: TaskOutcome) -> None:
        raise NotImplementedError

    def _settle_awaiting(self) -> None:
        raise NotImplementedError

    def start_reading(self, *, confirm: bool = False) -> None:
        """Follow the task's stream from its first entry until the terminal one.

        A lost connection is retried by the runtime's stream reader from the last entry
        this handle applied, so no entry is skipped or applied twice. Redis unreachable for
        ``reconnect_window`` seconds ends this handle's observation: it settles
        ``Unresolved(OBSERVATION_LOST)`` locally (the durable record, which cannot be
        reached, stays authoritative for the task itself). So does any other failure (the
        key is not a stream, an entry cannot be decoded), with its cause logged, except a
        malformed diagnostic, which is skipped as a diagnostic gap.

        ``confirm`` also marks the task's publish confirmed: the confirm-start script
        (``EVALSHA``) rides in front of the reader's reads until it lands, no round trip of
        its own (the sweeper may republish only a start whose publish was confirmed)."""
        runtime = self._runtime
        mark = None
        if confirm:
            store, task_id = runtime.store, self._id.value
            mark = Mark(
                store.confirm_start_sha,
                (runtime.keys.task(task_id),),
                lambda: store.confirm_start(task_id),  # loads the script (Redis restarted)
                f"task {task_id}: confirming its start",
            )
        follower = Follower(
            self._read_entries, self._reading_failed, self._lose_observation, self.reconnect_window
        )
        self._subscription = runtime.reader.subscribe(
            runtime.keys.events(self._id.value), "0-0", follower, mark
        )

    def follow_reads(self) -> tuple[str, AsyncIterator[StreamRead]]:
        """The id of the last stream entry this handle's reader applied, and every read it
        makes after it: the raw entries, for a relay (the HTTP API's event stream) that
        would otherwise read the same stream a second time.

        The reads end when the reader stops, after the terminal entry or earlier (its
        observation lost, or the outcome settled here): a relay that saw no terminal entry
        reads on by itself from the last entry it received, as it does after a
        ``StreamRead`` with ``dropped`` (it fell ``capacity`` reads behind)."""
        if self._reads is None:
            self._reads = BoundedFanout[StreamRead](
                self._runtime.settings.event_buffer_capacity,
                lambda n: StreamRead((), dropped=n),
            )
        reads = self._reads.subscribe()
        if self._outcome.done() or self._subscription is None or self._subscription.closed:
            self._reads.close()
        return self._last_entry, reads

    def _read_entries(self, entries: Sequence[StreamEntry]) -> None:
        """The next entries of the task's stream, in order (from the stream reader)."""
        if self._reads is not None:
            self._reads.publish(StreamRead(tuple(entries)))
        for entry_id, fields in entries:
            self._last_entry = entry_id
            self._apply(fields)

    def _reading_failed(self, error: BaseException) -> None:
        log.error(
            "event stream of task %s failed; observation lost", self._id.value, exc_info=error
        )
        self._finish(
            Unresolved(
                self._id,
                UnresolvedReason.OBSERVATION_LOST,
                f"the harness could not follow the task's event stream "
                f"({type(error).__name__}: {error}); the task may still run, and its "
                "outcome is recorded in its task record",
            )
        )

    def _raise(self, payload: InteractionPayload) -> None:
        raised = self._interactions.raise_(payload)
        if raised is None:
            return
        request, pending = raised
        if pending:
            self._state = TaskState.AWAITING_RESPONSE
        self._events.publish(InteractionRequested(self._id, request))

    def _lose_observation(self, seconds: float, error: BaseException) -> None:
        log.error(
            "event stream of task %s: Redis unreachable for %.0f s; observation lost",
            self._id.value,
            seconds,
        )
        partial = "".join(self._partial)
        self._finish(
            Unresolved(
                self._id,
                UnresolvedReason.OBSERVATION_LOST,
                f"the harness could not reach Redis for {seconds:.0f} s "
                f"({type(error).__name__}: {error}); the task may still run, and its "
                "outcome is recorded there",
                output=TextOutput(partial, complete=False) if partial else None,
            )
        )

    def _apply(self, fields: dict[str, str]) -> None:
        kind, tag, payload = fields.get("k", ""), fields.get("t", ""), fields.get("d", "")
        if kind == DIAGNOSTIC:
            try:
                diagnostic = diagnostic_from_entry(self._id, payload)
            except DecodeError as error:
                # Never terminal: skipping it loses one diagnostic, which the gap says.
                log.warning("task %s: malformed diagnostic skipped: %s", self._id.value, error)
                self._diagnostics.publish(DiagnosticGap(self._id, 1))
                return
            self._diagnostics.publish(diagnostic)
            return
        if tag == INTERACTION_TAG:
            self._raise(InteractionPayload.from_json(loads(payload)))
            return
        event = event_from_entry(self._id, tag, payload, remote_cause)
        if isinstance(event, InteractionResolved):
            reported = self._interactions.resolved_by_stream(event)
            self._settle_awaiting()
            if not reported:
                return
        if isinstance(event, TerminalEvent):
            self._settled_view = settled_view(fields)
            self._finish(event.outcome)
            return
        if isinstance(event, TaskStarted) and self._state is TaskState.STARTING:
            self._state = TaskState.RUNNING
        elif isinstance(event, MessageDelta) and event.role is MessageRole.ANSWER:
            self._partial.append(event.text)
        elif isinstance(event, Warning) and event.kind is WarningKind.RECOVERABLE:
            self._partial.clear()  # a resumed run starts its answer over
        self._events.publish(event)


__all__ = ["StreamRead", "TaskStreamFollower", "remote_cause"]
