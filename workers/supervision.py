"""Supervise a run's graph turn: step-boundary gates, one delivered cancellation, the
cleanup budget, and the outcome the turn's end means.

The gate before every model call (and every tool effect) reads the durable cancel flag
and the lease's deadline, so a cancellation whose signal was missed or swallowed, and a
lease that lapsed while the process stalled, still stop the run there. While the turn
runs, the supervisor waits for it, for a cancellation or for the lease's loss; it then
delivers one cancellation (to the model call if one is in flight, else to the run) and
waits the per-task cleanup budget. A turn that outlives the budget is settled
``Unresolved`` and waited for under its lease (:meth:`TurnSupervisor.outlive`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from agent_harness_protocol import (
    AgentUsage,
    Cancelled,
    Completed,
    Failed,
    FailureKind,
    TaskId,
    TaskOutcome,
    TextOutput,
    Unresolved,
    UnresolvedReason,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wire.profiles import AgentProfile, CancellationSemantics
from wire.store import RecordStore

from .errors import ModelCallCancelledError, RunCancelledError, StaleLeaseError
from .interrupts import Pause
from .lease import SessionLease
from .live_run import LiveRun
from .model_calls import ModelCalls
from .safeguards import halted_outcome
from .turn import TurnResult, TurnTranslator

log = logging.getLogger(__name__)


class OutlivedBudget(Exception):
    """The turn did not end within the cleanup budget after its cancellation: settle
    ``outcome`` and wait for ``execution`` under the lease."""

    def __init__(self, outcome: TaskOutcome, execution: asyncio.Task[TurnResult]) -> None:
        super().__init__("graph run outlived its cancellation budget")
        self.outcome = outcome
        self.execution = execution


class TurnSupervisor:
    """Supervises the turns of one worker process's runs.

    Args:
        calls: The process's model calls (what a cancellation is delivered to).
        store: The records (the durable cancel flag).
        budget: The per-task cleanup budget after a delivered cancellation.
    """

    def __init__(self, calls: ModelCalls, store: RecordStore, budget: timedelta) -> None:
        self._calls = calls
        self._store = store
        self._budget = budget.total_seconds()

    async def cancel_gate(self, live: LiveRun, lease: SessionLease) -> None:
        """Step boundary before the model is invoked (and before each tool effect): a lost
        lease stops the run, and a cancellation recorded by now wins, even one whose
        ``CancelledError`` was swallowed (redis-py's ``wait_for`` on Python 3.11) or whose
        message this process missed. One HGET, none once the in-memory signal is set.
        Unreadable (Redis restarting): the signal, the renewer and the listener still
        deliver it to the model call.

        The lease counts as lost here also when its renewal deadline passed, read from the
        clock, not only once the renewer said so: a worker stalled past the deadline (a
        SIGSTOP, a VM pause) resumes with its loop and its renewer thread racing, and its
        run must not start a model call before the renewer has run."""
        if not live.cancel_requested.is_set():
            try:
                if await self._store.cancel_recorded(live.task_id):
                    live.cancel_requested.set()
            except (RedisConnectionError, RedisTimeoutError) as error:
                log.warning("task %s: cancel flag unreadable (%s)", live.task_id, error)
        if live.cancel_requested.is_set():
            raise RunCancelledError(live.task_id)
        if live.lease_lost.is_set() or not lease.locally_valid():
            # The next holder runs the turn; this run must not call the model any more.
            raise StaleLeaseError("lease lost before the model call", task_id=live.task_id)

    async def supervise(
        self,
        task: TaskId,
        live: LiveRun,
        profile: AgentProfile,
        execution: asyncio.Task[TurnResult],
        resumed: bool,
        translator: TurnTranslator,
    ) -> TaskOutcome | Pause | None:
        """The turn's outcome (``None``: the lease was lost, the new holder settles)."""
        stop = asyncio.create_task(_first_of(live.cancel_requested, live.lease_lost))
        try:
            await asyncio.wait({execution, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        model_started = self._calls.started(live.task_id)
        if execution.done():
            return settled_result(task, execution, profile, model_started, resumed, translator)
        # Deliver one cancellation: to the model call if one is running, else to the run.
        delivered = self._calls.cancel(live.task_id)
        if live.lease_lost.is_set() or not delivered:
            execution.cancel()
        await asyncio.wait({execution}, timeout=self._budget)
        if live.lease_lost.is_set():
            return None
        if execution.done():
            return settled_result(
                task, execution, profile, self._calls.started(live.task_id), resumed, translator
            )
        raise OutlivedBudget(
            Unresolved(
                task,
                UnresolvedReason.CANCELLATION_UNCONFIRMED,
                "the graph run did not end within the per-task budget after cancellation",
            ),
            execution,
        )

    async def outlive(self, execution: asyncio.Task[TurnResult], lease: SessionLease) -> None:
        """Wait for a graph run that outlived its cancellation budget (its task is settled;
        it keeps the session's lease while it runs). Once the lease is lost it is
        cancelled again; its writes are refused either way."""
        lost = asyncio.create_task(lease.lost.wait())
        try:
            await asyncio.wait({execution, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
        if not execution.done():
            self._calls.cancel(lease.task_id)
            execution.cancel()
        with contextlib.suppress(BaseException):
            await execution


async def _first_of(*events: asyncio.Event) -> None:
    waiters = [asyncio.create_task(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def failed(task: TaskId, error: BaseException) -> Failed:
    """A run that ended with ``error``: ``Failed`` with it as the cause."""
    return Failed(task, FailureKind.UNKNOWN, str(error) or type(error).__name__, error)


def settled_result(
    task: TaskId,
    execution: asyncio.Task[TurnResult],
    profile: AgentProfile,
    model_started: bool,
    resumed: bool,
    translator: TurnTranslator,
) -> TaskOutcome | Pause | None:
    """What the ended turn means for the task (``None``: its lease was taken over)."""
    if not execution.cancelled() and isinstance(execution.exception(), RunCancelledError):
        # Stopped at a step boundary (before a model call or a tool's effect): no model
        # call was in flight, nothing can still be running. Usage: what the turn measured
        # (zero if it called no model; unknown if a lost run may have).
        return Cancelled(task, usage=translator.usage)
    cancelled = execution.cancelled() or isinstance(execution.exception(), ModelCallCancelledError)
    if cancelled:
        if not model_started:
            # This run never invoked the model: nothing can still be running. A resumed
            # task's lost run may have used tokens nobody measured.
            return Cancelled(task, usage=AgentUsage.UNKNOWN if resumed else AgentUsage.ZERO)
        if (
            profile.cancellation
            is CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED
        ):
            return Cancelled(task)
        return Unresolved(
            task,
            UnresolvedReason.CANCELLATION_UNCONFIRMED,
            "the model coroutine was cancelled; the provider may still be working",
        )
    error = execution.exception()
    if isinstance(error, StaleLeaseError):
        return None
    if error is not None:
        return failed(task, error)
    result = execution.result()
    if result.asks:
        return Pause(result.asks, result.usage)
    if result.halt is not None:
        return halted_outcome(task, result.halt, result.text, result.usage)
    output = None if result.text is None else TextOutput(result.text)
    return Completed(task, result.stop_reason, output, result.usage)


__all__ = ["OutlivedBudget", "TurnSupervisor", "failed", "settled_result"]
