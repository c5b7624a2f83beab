"""The caller-side handle of one delegated task.

Each handle follows the task's Redis Stream from its first entry through its runtime's
one stream reader (``harness.stream_reader``: one connection for every task the process
follows), updates the ``state`` snapshot and ``pending_interactions``, and feeds every
``events()`` and ``diagnostics()`` subscription through its own bounded buffer. Each
interaction is resolved at most once in a handle's events: a resolution this handle made
locally (a cancellation clearing it, an unconfirmed response) is not repeated when the
stream brings the durable one. The terminal entry is written by the one atomic settle
script, so every reader of every process sees the same single outcome.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent_harness_protocol import (
    AgentTask,
    ApprovalDecision,
    ApprovalResponse,
    Cleared,
    ClearReason,
    DiagnosticEvent,
    DiagnosticGap,
    HarnessTransportError,
    InteractionId,
    InteractionRequest,
    InteractionRequested,
    InteractionResolved,
    InteractionResponse,
    InteractionResponseUnconfirmedError,
    MessageDelta,
    MessageRole,
    ObservationGap,
    Responded,
    SessionId,
    TaskEvent,
    TaskId,
    TaskOutcome,
    TaskStarted,
    TaskState,
    TerminalEvent,
    TextOutput,
    UnconfirmedResponse,
    Unresolved,
    UnresolvedReason,
    Warning,
    WarningKind,
)
from agent_harness_protocol.diagnostics import TaskDiagnostics
from redis.exceptions import RedisError

from wire.codec import (
    DIAGNOSTIC,
    INTERACTION_TAG,
    RemoteCause,
    diagnostic_from_entry,
    dumps,
    event_from_entry,
    event_to_entry,
    loads,
    outcome_from_json,
    outcome_to_json,
    terminal_event,
)
from wire.errors import DecodeError
from wire.interactions import (
    InteractionPayload,
    resolution_to_json,
)
from wire.store import CancelResult, RespondResult, SettleResult

from .errors import InteractionClosedError, RemoteTaskError, UnknownInteractionError
from .fanout import BoundedFanout
from .info import SettledView, settled_view
from .redis_errors import Fate, fate, reported
from .runtime import CallerRuntime
from .stream_reader import Follower, Mark, StreamEntry, Subscription

log = logging.getLogger(__name__)

_STATE_OF_TERMINAL = {
    "TaskCompleted": TaskState.COMPLETED,
    "TaskFailed": TaskState.FAILED,
    "TaskCancelled": TaskState.CANCELLED,
    "TaskUnresolved": TaskState.UNRESOLVED,
}


@dataclass(frozen=True, slots=True)
class StreamRead:
    """The entries one read of a task's stream returned, in order; or, with ``dropped``,
    how many reads a subscriber that fell behind missed (it must read them itself)."""

    entries: tuple[StreamEntry, ...]
    dropped: int = 0


def remote_cause(cause: RemoteCause) -> RemoteTaskError:
    return RemoteTaskError(cause.type_name, cause.module, cause.message)


class CeleryTask(AgentTask, TaskDiagnostics):
    reconnect_window: float = 60.0
    """Seconds the stream reader keeps reconnecting to an unreachable Redis before this
    handle settles ``Unresolved(OBSERVATION_LOST)`` (read when the handle starts reading)."""

    def __init__(
        self,
        runtime: CallerRuntime,
        session_id: SessionId,
        task_id: TaskId,
        *,
        replayed: bool = False,
        queued: bool = False,
        created_at: datetime | None = None,
    ) -> None:
        """A handle on task ``task_id`` of session ``session_id``. It shares the harness's
        ``runtime`` with its session's handle and never holds that handle: everything it
        needs of the session is its id and the records in Redis.

        ``replayed``: the handle answers a retried start (same idempotency key) with the
        task its first attempt started. ``queued``: the task waits behind its session's
        running task (the ``enqueue`` strategy). ``created_at``: the Redis time of its start,
        when the start returned it."""
        self.replayed = replayed
        self.queued = queued
        self.created_at = created_at
        self._runtime = runtime
        self._session_id = session_id
        self._id = task_id
        self._state = TaskState.STARTING
        self._outcome: asyncio.Future[TaskOutcome] = asyncio.get_running_loop().create_future()
        self._cancel_recorded = False
        capacity = self._runtime.settings.event_buffer_capacity
        self._events = BoundedFanout[TaskEvent](capacity, lambda n: ObservationGap(task_id, n))
        self._diagnostics = BoundedFanout[DiagnosticEvent](
            capacity, lambda n: DiagnosticGap(task_id, n)
        )
        self._subscription: Subscription | None = None
        self._reads: BoundedFanout[StreamRead] | None = None
        self._settled_view: SettledView | None = None
        """The settled record's view its terminal entry carried (``None`` before, or when
        this handle settled the task by itself)."""
        self._last_entry = "0-0"
        """The id of the last stream entry the reader applied."""
        self._partial: list[str] = []
        """Answer text observed so far: the output of an outcome settled here."""
        self._raised: dict[str, InteractionPayload] = {}
        """Every interaction this handle saw raised, by id."""
        self._pending: dict[str, InteractionRequest] = {}
        self._resolved: set[str] = set()
        """Interactions whose resolution this handle's events carried (at most once each)."""
        self._submitted: set[str] = set()
        """Interactions this handle sent a response to: never sent twice."""
        self._delivering: dict[str, InteractionResolved | None] = {}
        """Responses in flight, with the resolution the stream brought meanwhile: held
        back until the delivery's fate decides which resolution this handle reports."""

    # -- AgentTask ----------------------------------------------------------------------
    @property
    def id(self) -> TaskId:
        return self._id

    @property
    def session_id(self) -> SessionId:
        return self._session_id

    @property
    def state(self) -> TaskState:
        return self._state

    def events(self) -> AsyncIterator[TaskEvent]:
        return self._events.subscribe()

    def diagnostics(self) -> AsyncIterator[DiagnosticEvent]:
        """Provider diagnostics; recorded only for sessions that require diagnostics."""
        return self._diagnostics.subscribe()

    @property
    def pending_interactions(self) -> tuple[InteractionRequest, ...]:
        return tuple(self._pending.values())

    async def respond(self, interaction_id: InteractionId, response: InteractionResponse) -> None:
        """Answer a pending approval or question; its task resumes on any worker.

        The response is checked here first (nothing is sent for a wrong one), then
        delivered once by one atomic script. A handle sends at most one response per
        interaction, also when the caller of the first one was cancelled meanwhile (that
        delivery goes on).

        Raises:
            ValueError: the wrong kind of response, or a decision the request does not
                offer; nothing was sent, the interaction stays pending.
            UnknownInteractionError: (a ``LookupError`` and ``ValueError``) the task raised no such
                interaction.
            InteractionClosedError: (a ``RuntimeError``) it is no longer pending here: a
                response was already submitted, or it was resolved or cleared.
            HarnessTransportError: the response surely did not reach Redis; it stays
                pending, respond again.
            InteractionResponseUnconfirmedError: whether the response was applied is
                unknown (its reply was lost), or the task was cancelled or ended before
                it arrived; the interaction is cleared here (``RESPONSE_UNCONFIRMED``)
                and no second response can duplicate an effect.
        """
        key = interaction_id.value
        if key in self._submitted:
            raise InteractionClosedError(self._id.value, key, "a response was already submitted")
        if key in self._resolved:
            raise InteractionClosedError(self._id.value, key, "it is resolved")
        payload = self._raised.get(key) or await self._look_up(key)
        payload.check(response)
        if key in self._submitted or key in self._resolved:  # decided while looking it up
            raise InteractionClosedError(self._id.value, key, "it is no longer pending")
        self._submitted.add(key)
        # The delivery belongs to the handle, not to this caller: cancelling the caller
        # leaves it running (and the gate closed).
        delivery = self._runtime.spawn(self._deliver(payload, response))
        await asyncio.shield(delivery)

    async def _look_up(self, key: str) -> InteractionPayload:
        """An interaction this handle's reader has not seen yet, from Redis."""
        with reported("the interaction could not be read"):
            raised, resolved = await self._runtime.store.interactions(self._id.value)
        if key not in raised:
            raise UnknownInteractionError(self._id.value, key)
        if key in resolved:
            raise InteractionClosedError(self._id.value, key, "it is resolved")
        payload = InteractionPayload.from_json(raised[key])
        self._raised.setdefault(key, payload)
        return payload

    async def _deliver(self, payload: InteractionPayload, response: InteractionResponse) -> None:
        key = payload.interaction_id
        resolution = Responded(response)
        event = InteractionResolved(self._id, InteractionId(key), resolution)
        decision = response.decision if isinstance(response, ApprovalResponse) else None
        self._delivering[key] = None
        try:
            await self._deliver_once(payload, response, event, decision)
        finally:
            held = self._delivering.pop(key, None)
            if held is not None and key not in self._resolved:
                self._resolved.add(key)
                self._events.publish(held)

    async def _deliver_once(
        self,
        payload: InteractionPayload,
        response: InteractionResponse,
        event: InteractionResolved,
        decision: ApprovalDecision | None,
    ) -> None:
        key = payload.interaction_id
        resolution = event.resolution
        try:
            result, detail, settled, promoted = await self._runtime.responder.respond(
                self._session_id.value,
                self._id.value,
                key,
                dumps(resolution_to_json(resolution)),
                event_to_entry(event)[1],
                grant=decision is ApprovalDecision.APPROVE_FOR_SESSION,
                cancels=decision is ApprovalDecision.CANCEL,
            )
        except RedisError as error:
            if fate(error) is Fate.REFUSED:
                self._submitted.discard(key)  # surely not delivered: still pending
                raise HarnessTransportError(
                    f"the response to interaction {key} did not reach Redis "
                    f"({type(error).__name__}: {error}); it is still pending"
                ) from error
            self._clear(key, ClearReason.RESPONSE_UNCONFIRMED)
            raise InteractionResponseUnconfirmedError(
                UnconfirmedResponse(self._id, InteractionId(key)),
                f"whether the response to interaction {key} was applied is unknown "
                f"({type(error).__name__}: {error}); it is not sent again",
            ) from error
        if result is RespondResult.OK:
            self._pending.pop(key, None)
            self._settle_awaiting()
            if decision is ApprovalDecision.CANCEL:
                # The script recorded the cancellation and settled a paused task: this
                # handle's events carry the answer before the terminal event.
                self._cancel_recorded = True
                if key not in self._resolved:
                    self._resolved.add(key)
                    self._events.publish(event)
                for other in tuple(self._pending):
                    self._clear(other, ClearReason.CANCELLATION_REQUESTED)
                if settled:
                    self._finish(outcome_from_json(loads(settled), remote_cause))
                if promoted:
                    self._runtime.spawn(self._publish_promoted(promoted))
            if detail == "1":
                await self._publish_resume()
            return
        self._pending.pop(key, None)
        self._settle_awaiting()
        if result is RespondResult.RESOLVED:
            raise InteractionClosedError(self._id.value, key, "another response resolved it")
        if result is RespondResult.UNKNOWN:
            raise UnknownInteractionError(self._id.value, key)
        # Cancelled or settled before the response arrived: it was not applied. The
        # cancellation's own resolution (cleared) is what the events carry.
        raise InteractionResponseUnconfirmedError(
            UnconfirmedResponse(self._id, InteractionId(key)),
            f"the task was {'cancelled' if result is RespondResult.CANCELLED else 'settled'} "
            f"before the response to interaction {key} arrived; it was not applied",
        )

    async def _publish_resume(self) -> None:
        """The task is due: publish its resume run. A failure is logged: the workers'
        sweeper publishes it again (the task is in the starting set)."""
        try:
            queue = await self._runtime.store.task_queue(self._id.value)
            await self._runtime.publisher.publish(self._id.value, self._session_id.value, queue)
        except Exception as error:
            log.warning(
                "publishing the resume of task %s failed (the sweeper will): %s",
                self._id.value,
                error,
            )

    def _clear(self, key: str, reason: ClearReason) -> None:
        """Resolve ``key`` here as cleared, once, in this handle's events."""
        self._pending.pop(key, None)
        if key not in self._resolved and key in self._raised:
            self._resolved.add(key)
            self._events.publish(InteractionResolved(self._id, InteractionId(key), Cleared(reason)))
        self._settle_awaiting()

    def _settle_awaiting(self) -> None:
        if not self._pending and self._state is TaskState.AWAITING_RESPONSE:
            self._state = TaskState.RUNNING

    async def request_cancellation(self) -> None:
        """Record the request durably, tell the running worker at once; a task still queued
        is settled here and its message revoked.

        Returns without waiting for termination; a task still queued is settled
        ``Cancelled`` right away and never starts. Once the request is recorded, later
        calls return at once.

        Raises:
            HarnessTransportError: the request could not be recorded (Redis unreachable
                or refusing writes); call again.
        """
        if self._outcome.done() or self._cancel_recorded:
            return
        with reported("the cancellation was not recorded"):
            result, payload, promoted = await self._runtime.store.cancel(
                self._session_id.value, self._id.value
            )
        self._cancel_recorded = True
        # The script cleared every pending interaction before recording the request.
        for key in tuple(self._pending):
            self._clear(key, ClearReason.CANCELLATION_REQUESTED)
        if result is CancelResult.SETTLED:
            self._finish(outcome_from_json(loads(payload), remote_cause))
        if promoted:
            # The task queued behind this one starts now; if this publish fails, the
            # workers' sweeper publishes it after its hold-off.
            self._runtime.spawn(self._publish_promoted(promoted))
        if result is CancelResult.SETTLED:
            # Only a settled task's message is revoked: workers discard a revoked id on
            # every delivery for hours, and a running task may need another delivery
            # (a hand-back) to settle its cancellation.
            self._runtime.spawn(self._runtime.publisher.revoke(self._id.value))

    async def await_outcome(self) -> TaskOutcome:
        return await asyncio.shield(self._outcome)

    # -- used by the session ------------------------------------------------------------
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

    @property
    def settled(self) -> bool:
        return self._outcome.done()

    @property
    def settled_view(self) -> SettledView | None:
        """The task record's settled view, from the terminal entry this handle read."""
        return self._settled_view

    def when_settled(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once this handle has the task's outcome (at once if it has)."""
        self._outcome.add_done_callback(lambda _: callback())

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

    async def stop(self, within: float, reason: UnresolvedReason, known: str) -> None:
        """Request cancellation and wait at most ``within`` seconds; then settle
        ``Unresolved``."""
        if self._outcome.done():
            return
        try:
            async with asyncio.timeout(within):
                try:
                    await self.request_cancellation()
                except HarnessTransportError as error:
                    log.warning("task %s: %s", self._id.value, error)
                await asyncio.shield(self._outcome)
        except TimeoutError:
            await self.force_unresolved(reason, known)

    async def force_unresolved(self, reason: UnresolvedReason, known: str) -> None:
        """Settle now, without the lease: the run may still be going (and keeps the
        session blocked until it ends). Whatever settled first wins."""
        if self._outcome.done():
            return
        outcome = Unresolved(self._id, reason, known)
        try:
            settlement = await self._runtime.store.settle(
                self._session_id.value,
                self._id.value,
                TaskState.UNRESOLVED.value,
                outcome_to_json(outcome),
            )
        except RedisError as error:
            # The record cannot be reached; this handle ends anyway, and says why.
            log.warning("task %s: settling unresolved failed: %s", self._id.value, error)
            self._finish(
                Unresolved(
                    self._id,
                    reason,
                    f"{known}; the task record could not be reached "
                    f"({type(error).__name__}: {error})",
                )
            )
            return
        if settlement.result in {SettleResult.SETTLED, SettleResult.TERMINAL}:
            self._finish(outcome_from_json(loads(settlement.outcome), remote_cause))

    # -- internals ----------------------------------------------------------------------
    async def _publish_promoted(self, task_id: str) -> None:
        try:
            queue = await self._runtime.store.task_queue(task_id)
            await self._runtime.publisher.publish(task_id, self._session_id.value, queue)
        except Exception as error:
            log.warning("publishing queued task %s failed (the sweeper will): %s", task_id, error)

    def _finish(self, outcome: TaskOutcome) -> None:
        if self._outcome.done():
            return
        for key, held in tuple(self._delivering.items()):
            if held is not None and key not in self._resolved:
                self._resolved.add(key)
                self._events.publish(held)
        for key in tuple(self._pending):
            self._clear(key, ClearReason.TASK_ENDED)
        event: TerminalEvent[Any] = terminal_event(outcome)
        self._state = _STATE_OF_TERMINAL[type(event).__name__]
        self._outcome.set_result(outcome)
        self._events.close(event)
        self._diagnostics.close()
        if self._subscription is not None:
            self._subscription.close()
        if self._reads is not None:
            self._reads.close()

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
        key = payload.interaction_id
        if key in self._raised:
            return
        self._raised[key] = payload
        request = payload.to_request()
        if key not in self._resolved and key not in self._submitted:
            self._pending[key] = request
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
            key = event.interaction_id.value
            self._pending.pop(key, None)
            self._settle_awaiting()
            if key in self._resolved:
                return  # this handle's events carried its resolution already
            if key in self._delivering and isinstance(event.resolution, Responded):
                # Our response is in flight: its fate decides what this handle reports
                # (a lost reply reports it cleared as unconfirmed, although it landed).
                self._delivering[key] = event
                return
            self._resolved.add(key)
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
