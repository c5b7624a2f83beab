"""The caller-side handle of one delegated task.

A handle answers the AHP task calls (``events()``, ``diagnostics()``, ``state``,
``pending_interactions``, ``respond``, ``request_cancellation``, ``await_outcome``) and
is settled exactly once. It follows the task's stream as ``harness.task_stream``
describes, and keeps each interaction raised once and resolved at most once in its events
(``harness.task_interactions``); a response is checked, then delivered once by one
atomic script, whatever happens to the caller that sent it (``harness.task_responses``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

from agent_harness_protocol import (
    AgentTask,
    ClearReason,
    DiagnosticEvent,
    DiagnosticGap,
    HarnessTransportError,
    InteractionRequest,
    ObservationGap,
    SessionId,
    TaskEvent,
    TaskId,
    TaskOutcome,
    TaskState,
    TerminalEvent,
    Unresolved,
    UnresolvedReason,
)
from agent_harness_protocol.diagnostics import TaskDiagnostics
from opentelemetry.context import Context
from redis.exceptions import RedisError

from wire.codec import loads, outcome_from_json, outcome_to_json, terminal_event
from wire.store import CancelResult, SettleResult
from wire.tracing_context import active

from . import spans
from .fanout import BoundedFanout
from .info import SettledView
from .redis_errors import reported
from .runtime import CallerRuntime
from .stream_reader import StreamEntry, Subscription
from .task_interactions import TaskInteractions
from .task_responses import TaskResponder
from .task_stream import StreamRead, TaskStreamFollower, remote_cause

log = logging.getLogger(__name__)

_STATE_OF_TERMINAL = {
    "TaskCompleted": TaskState.COMPLETED,
    "TaskFailed": TaskState.FAILED,
    "TaskCancelled": TaskState.CANCELLED,
    "TaskUnresolved": TaskState.UNRESOLVED,
}


class CeleryTask(TaskStreamFollower, TaskResponder, AgentTask, TaskDiagnostics):
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
        self._interactions = TaskInteractions(task_id, self._events)
        self._trace: tuple[Context, int] | None = None

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
        return self._interactions.pending

    def _clear_pending(self, reason: ClearReason) -> None:
        self._interactions.clear_pending(reason)
        self._settle_awaiting()

    def _settle_awaiting(self) -> None:
        if not self._interactions.any_pending() and self._state is TaskState.AWAITING_RESPONSE:
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
        self._clear_pending(ClearReason.CANCELLATION_REQUESTED)
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
    def traced(self, context: Context | None) -> None:
        """The task's trace context, when this handle started it while tracing (the
        ``ahp.start_task`` span's): the outcome it observes is a span of that trace."""
        if context is not None:
            self._trace = (context, time.time_ns())

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
            if active():
                await spans.publish_in_task_trace(
                    self._runtime.store,
                    self._runtime.publisher,
                    task_id,
                    self._session_id.value,
                    "ahp.promote",
                )
                return
            queue = await self._runtime.store.task_queue(task_id)
            await self._runtime.publisher.publish(task_id, self._session_id.value, queue)
        except Exception as error:
            log.warning("publishing queued task %s failed (the sweeper will): %s", task_id, error)

    def _finish(self, outcome: TaskOutcome) -> None:
        if self._outcome.done():
            return
        self._interactions.task_ended()
        self._settle_awaiting()
        event: TerminalEvent[Any] = terminal_event(outcome)
        self._state = _STATE_OF_TERMINAL[type(event).__name__]
        self._outcome.set_result(outcome)
        if self._trace is not None:
            context, since = self._trace
            spans.outcome_observed(context, self._id.value, self._state.value, since)
        self._events.close(event)
        self._diagnostics.close()
        if self._subscription is not None:
            self._subscription.close()
        if self._reads is not None:
            self._reads.close()


__all__ = ["CeleryTask", "StreamEntry", "StreamRead", "remote_cause"]
