"""Execute one AHP task: claim, fenced lease, graph turn, events, settle exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_harness_protocol import (
    AgentUsage,
    Cancelled,
    Completed,
    DiagnosticsRequirement,
    Failed,
    FailureKind,
    StopReason,
    TaskId,
    TaskOutcome,
    TaskState,
    TextOutput,
    Unresolved,
    UnresolvedReason,
    Warning,
    WarningKind,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wire.backoff import CONNECTION_ERRORS, Outage
from wire.codec import (
    SEMANTIC,
    RemoteCause,
    dumps,
    event_to_entry,
    loads,
    outcome_to_json,
    run_metadata_from_json,
    spec_from_json,
    task_input_from_json,
    usage_from_json,
    usage_to_json,
)
from wire.narrowing import narrowing_of
from wire.profiles import AgentProfile, CancellationSemantics
from wire.records import SessionField, TaskField
from wire.settings import Settings
from wire.store import (
    HANDED_BACK,
    PauseResult,
    RecordStore,
    Settlement,
    SettleResult,
)
from wire.structured_output import parse_schema

from .append_batcher import Appender
from .approval_route import APPROVAL_METADATA
from .claimer import ClaimedRun
from .errors import (
    ModelCallCancelledError,
    ProfileMismatchError,
    RunCancelledError,
    StaleLeaseError,
)
from .event_sink import EventSink, Withheld
from .graph import AgentGraph, ModelCalls
from .interrupts import Pause, resume_values
from .lease import SessionLease
from .lease_renewer import LeaseRenewer
from .pruning import CheckpointPruner
from .stream_items import HaltReason
from .structured import judged, system_prompt
from .turn import TurnResult, TurnTranslator, run_turn

log = logging.getLogger(__name__)


@dataclass(eq=False)
class LiveRun:
    """A run of this process, reachable by the cancellation listener and the runtime."""

    task_id: str
    cancel_requested: asyncio.Event = field(default_factory=asyncio.Event)
    lease_lost: asyncio.Event = field(default_factory=asyncio.Event)
    """Shared with the run's ``SessionLease`` (``lost``)."""
    task: asyncio.Task[None] | None = None
    """The asyncio task running it: what the runtime cancels when it stops."""
    handed_back: bool = False
    """The worker is stopping and the graph run ended unsettled: the lease is handed back
    so the redelivered message resumes the task at once."""


class GraphProvider:
    """Builds (once) the compiled graph of each profile; tracks their model calls."""

    calls: ModelCalls

    async def graph(self, profile: AgentProfile) -> AgentGraph:
        raise NotImplementedError


_STATE_OF = {
    Completed: TaskState.COMPLETED,
    Failed: TaskState.FAILED,
    Cancelled: TaskState.CANCELLED,
    Unresolved: TaskState.UNRESOLVED,
}


def _encoded(outcome: TaskOutcome) -> dict[str, object]:
    cause = outcome.cause if isinstance(outcome, Failed) else None
    return outcome_to_json(outcome, RemoteCause.of(cause) if cause is not None else None)


Publish = Callable[[str, str], Awaitable[None]]
"""Publishes a task's run message: ``publish(task_id, session_id)``."""


class TaskRunner:
    def __init__(
        self,
        *,
        settings: Settings,
        store: RecordStore,
        profiles: Mapping[str, AgentProfile],
        graphs: GraphProvider,
        runs: dict[str, LiveRun],
        delete_thread: ThreadDeleter,
        pruner: CheckpointPruner | None = None,
        publish: Publish | None = None,
        renewer: LeaseRenewer | None = None,
        appender: Appender | None = None,
    ) -> None:
        """``renewer``: the process's lease renewer (without one, leases are never renewed
        and lapse after one TTL: only for tests of a single short run)."""
        self._settings = settings
        self._store = store
        self._profiles = profiles
        self._graphs = graphs
        self._runs = runs
        self._delete_thread = delete_thread
        self._pruner = pruner
        self._publish = publish
        self._renewer = renewer
        self._appender: Appender = appender or store

    async def run_claimed(self, claimed: ClaimedRun) -> None:
        """Run a delivery claimed outside the loop (``workers.claimer``), whose lease the
        renewer already renews."""
        task_id, claim, lease = claimed.task_id, claimed.claim, claimed.lease
        live = LiveRun(
            task_id,
            task=asyncio.current_task(),
            cancel_requested=lease.cancel_requested,
            lease_lost=lease.lost,
        )
        self._runs[task_id] = live
        try:
            if not await lease.ready():
                log.warning("task %s: its lease lapsed before the run could start", task_id)
                await lease.stop()
                return
            handed_back = claim.previous_state == HANDED_BACK
            resumed = handed_back or claim.previous_state == TaskState.RUNNING.value
            await self._run_claimed(
                live, lease, claim.task, claim.session, resumed=resumed, handed_back=handed_back
            )
        finally:
            self._runs.pop(task_id, None)

    async def _run_claimed(
        self,
        live: LiveRun,
        lease: SessionLease,
        record: Mapping[str, str],
        session: Mapping[str, str],
        *,
        resumed: bool,
        handed_back: bool = False,
    ) -> None:
        task_id = live.task_id
        session_id = lease.session_id
        sink = EventSink(self._appender, session_id, task_id, lease.value)
        sink.start()
        if resumed:
            what = "stopped and handed it back" if handed_back else "was lost"
            tag, payload = event_to_entry(
                Warning(
                    TaskId(task_id),
                    WarningKind.RECOVERABLE,
                    f"the worker running this task {what}; resuming from the session's "
                    f"last checkpoint (delivery {record.get(TaskField.DELIVERIES, '?')}); output "
                    "streamed before is superseded and usage is unknown",
                )
            )
            sink.emit(SEMANTIC, tag, payload)
        lease.start()
        run_ended = True
        released = False
        try:
            result = await self._outcome(live, lease, record, session, sink, resumed)
            outcome = (
                await self._pause(live, lease, sink, result)
                if isinstance(result, Pause)
                else result
            )
            if outcome is None or lease.lost.is_set():
                # The new holder settles; events of this run would be refused anyway.
                log.warning(
                    "task %s lost its lease; its outcome is left to the new holder", task_id
                )
                return
            withheld = await sink.withhold()
            if sink.lease_lost or lease.lost.is_set():
                log.warning(
                    "task %s lost its lease; its outcome is left to the new holder", task_id
                )
                return
            lease.ending()
            released = await self._finish(session_id, outcome, lease.value, sink, withheld)
        except _OutlivedBudget as outlived:
            run_ended = False
            await sink.drain()
            # Not ``lease.ending()``: the run goes on under its lease, and must stop
            # when the renewer finds the lease lost.
            await self._settle(session_id, outlived.outcome, lease.value, run_ended=False)
            await self._outlive(outlived.execution, lease)
        except asyncio.CancelledError:
            if live.handed_back:
                await _shielded(self._hand_back(sink, lease))
            raise
        finally:
            await lease.stop()
            if not run_ended:
                await self._start_promoted(await lease.release(), session_id)
                record_now = await self._store.session_record(session_id)
                # Released: closed and not persistent, or already forgotten (no record).
                released = not record_now or (
                    record_now.get(SessionField.CLOSED) == "1"
                    and record_now.get(SessionField.PERSISTENT) != "1"
                )
            if released:
                await self._delete_released_thread(session_id)

    async def _outcome(
        self,
        live: LiveRun,
        lease: SessionLease,
        record: Mapping[str, str],
        session: Mapping[str, str],
        sink: EventSink,
        resumed: bool,
    ) -> TaskOutcome | Pause | None:
        task = TaskId(live.task_id)
        session_id = lease.session_id
        try:
            profile = self._profile_for(session)
            spec = spec_from_json(loads(session[SessionField.SPEC]))
            task_input = task_input_from_json(loads(record[TaskField.INPUT]))
            text = task_input.text
            narrowing = task_input.narrowing.within(narrowing_of(spec))
            schema = (
                None if task_input.output_schema is None else parse_schema(task_input.output_schema)
            )
            session_usage = usage_from_json(loads(session.get(SessionField.USAGE) or "{}"))
            labels = run_metadata_from_json(session.get(SessionField.METADATA, ""))
            graph = await self._graphs.graph(profile)
        except Exception as error:
            return _failed(task, error)
        metadata = {
            **labels,
            "ahp_task_id": live.task_id,
            "ahp_session_id": session_id,
            # How the session wants approval-gated tool calls decided (the approval route).
            APPROVAL_METADATA: spec.requirements.approval.value,
        }
        self._graphs.calls.guard(live.task_id, lambda: self._cancel_gate(live, lease))
        # What the task's runs measured before it paused for the caller.
        base = usage_from_json(loads(record.get(TaskField.PAUSED_USAGE) or "{}"))
        paused_before = bool(record.get(TaskField.PAUSED_USAGE))
        interruptions = 0
        try:
            while True:
                resume = None
                try:
                    # Paused at interrupts this task raised: resume them with the
                    # caller's responses (also after a resumed run was lost). Only a task
                    # that paused before can have them: no read for the others. (A run
                    # lost between its interrupt and the pause runs on and asks again.)
                    if paused_before:
                        thread_id = self._store.keys.thread_id(session_id)
                        interrupts = await graph.pending_interrupts(thread_id)
                        resume = await resume_values(self._store, live.task_id, interrupts)
                except Exception as error:
                    if connection_lost(error):
                        raise
                    return _failed(task, error)
                translator = TurnTranslator(
                    task,
                    sink,
                    session_usage,
                    diagnostics=spec.requirements.diagnostics is DiagnosticsRequirement.REQUIRED,
                    usage_known=not resumed,
                    tools=graph.has_tools,
                    usage_before=base if paused_before else None,
                )
                execution = asyncio.create_task(
                    run_turn(
                        graph,
                        translator,
                        self._store.keys.thread_id(session_id),
                        text,
                        system_prompt(spec.instructions, schema),
                        metadata,
                        resumed=resumed,
                        lease=lease,
                        resume=resume,
                        narrowing=narrowing,
                    )
                )
                try:
                    outcome = await self._supervise(
                        task, live, profile, execution, resumed, translator
                    )
                    if schema is not None and not isinstance(outcome, Pause):
                        outcome = judged(outcome, schema, sink)
                except asyncio.CancelledError:
                    # The worker is stopping mid-run: end the graph run before handing it
                    # back.
                    execution.cancel()
                    await asyncio.wait(
                        {execution}, timeout=self._settings.cleanup_per_task.total_seconds()
                    )
                    live.handed_back = execution.done()
                    raise
                if not _interrupted_by_redis(execution) or interruptions >= _TURN_RESUMES:
                    return outcome
                interruptions += 1
                if await self._resume_after_redis(live, lease, sink, execution):
                    resumed = True
                    continue
                if lease.lost.is_set():
                    return None  # the new holder settles
                if await self._cancel_known(live):
                    # The run has ended (its turn failed): cancellation is observed.
                    started = resumed or self._graphs.calls.started(live.task_id)
                    return Cancelled(task, usage=AgentUsage.UNKNOWN if started else AgentUsage.ZERO)
                return outcome
        finally:
            self._graphs.calls.forget(live.task_id)

    async def _pause(
        self, live: LiveRun, lease: SessionLease, sink: EventSink, pause: Pause
    ) -> TaskOutcome | None:
        """The turn stopped to ask the caller: write its events, then pause the task in
        one fenced step (its interactions stored and announced, awaiting the caller, the
        lease released): the delivery ends without settling and holds no worker. A
        cancellation recorded by now wins: the run has ended, so it settles Cancelled.
        None: nothing more to do here (paused, or the lease is another run's)."""
        task_id = live.task_id
        await sink.drain()
        if sink.lease_lost or lease.lost.is_set():
            log.warning("task %s lost its lease before pausing; left to the new holder", task_id)
            return None
        await self._prune(lease.session_id, lease.value)
        await lease.stop()
        result = await self._store.pause(
            lease.session_id,
            task_id,
            lease.value,
            dumps(usage_to_json(pause.usage)),
            [(ask.interaction_id, dumps(ask.to_json())) for ask in pause.payloads],
        )
        if result is PauseResult.PAUSED:
            log.info(
                "task %s paused for the caller (%s)",
                task_id,
                ", ".join(ask.interaction_id for ask in pause.payloads),
            )
            return None
        if result is PauseResult.CANCELLED:
            return Cancelled(TaskId(task_id), usage=pause.usage)
        log.warning("task %s could not pause: %s", task_id, result.value)
        return None

    async def _cancel_known(self, live: LiveRun) -> bool:
        """Whether cancellation was requested, as far as can be known now (the durable
        flag is read when Redis answers)."""
        if live.cancel_requested.is_set():
            return True
        try:
            return await self._store.cancel_recorded(live.task_id)
        except CONNECTION_ERRORS:
            return False

    async def _resume_after_redis(
        self, live: LiveRun, lease: SessionLease, sink: EventSink, execution: asyncio.Task[Any]
    ) -> bool:
        """The turn failed because Redis could not be reached (a restart, a reset
        connection): wait for Redis while the lease may still be ours, then say so in a
        recoverable warning. Whether the turn may run again from the session's last
        checkpoint, as a resumed run on another worker would."""
        error = execution.exception()
        outage = Outage(
            f"task {live.task_id}: Redis lost mid-turn", window=self._settings.lease_ttl, logger=log
        )
        while True:
            if lease.lost.is_set() or live.cancel_requested.is_set():
                return False
            try:
                await self._store.redis.ping()
                break
            except CONNECTION_ERRORS as ping_error:
                if outage.exhausted():
                    return False
                await outage.back_off(ping_error)
        if lease.lost.is_set() or await self._cancel_known(live):
            return False
        tag, payload = event_to_entry(
            Warning(
                TaskId(live.task_id),
                WarningKind.RECOVERABLE,
                f"the turn lost its Redis connection ({type(error).__name__}: {error}); "
                "resuming from the session's last checkpoint; output streamed before is "
                "superseded and usage is unknown",
            )
        )
        sink.emit(SEMANTIC, tag, payload)
        return True

    def _profile_for(self, session: Mapping[str, str]) -> AgentProfile:
        name = session.get(SessionField.PROFILE, "")
        profile = self._profiles.get(name)
        if profile is None:
            raise ProfileMismatchError(name, f"this worker has no profile {name!r}")
        if profile.digest != session.get(SessionField.PROFILE_DIGEST):
            raise ProfileMismatchError(
                name,
                f"profile {name!r} differs between the caller and this worker; "
                "deploy the same profile registry to both",
            )
        return profile

    async def _cancel_gate(self, live: LiveRun, lease: SessionLease) -> None:
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

    async def _supervise(
        self,
        task: TaskId,
        live: LiveRun,
        profile: AgentProfile,
        execution: asyncio.Task[TurnResult],
        resumed: bool,
        translator: TurnTranslator,
    ) -> TaskOutcome | Pause | None:
        stop = asyncio.create_task(_first_of(live.cancel_requested, live.lease_lost))
        try:
            await asyncio.wait({execution, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        model_started = self._graphs.calls.started(live.task_id)
        if execution.done():
            return _settled_result(task, execution, profile, model_started, resumed, translator)
        # Deliver one cancellation: to the model call if one is running, else to the run.
        delivered = self._graphs.calls.cancel(live.task_id)
        if live.lease_lost.is_set() or not delivered:
            execution.cancel()
        budget = self._settings.cleanup_per_task.total_seconds()
        await asyncio.wait({execution}, timeout=budget)
        if live.lease_lost.is_set():
            return None
        if execution.done():
            return _settled_result(
                task,
                execution,
                profile,
                self._graphs.calls.started(live.task_id),
                resumed,
                translator,
            )
        raise _OutlivedBudget(
            Unresolved(
                task,
                UnresolvedReason.CANCELLATION_UNCONFIRMED,
                "the graph run did not end within the per-task budget after cancellation",
            ),
            execution,
        )

    async def _finish(
        self,
        session_id: str,
        outcome: TaskOutcome,
        lease: str,
        sink: EventSink,
        withheld: Withheld | None,
    ) -> bool:
        """The run's last events, pruning and settle in one round trip (see
        ``RecordStore.finish``); one by one if that round trip failed (each step is
        idempotent) or a full pruning sweep is due. Whether the session has been released."""
        prune = None if self._pruner is None else self._pruner.chain_call(session_id, lease)
        if prune is not None or self._pruner is None:
            task_id = outcome.task_id.value
            try:
                appended, settlement = await self._store.finish(
                    session_id,
                    task_id,
                    lease,
                    None if withheld is None else (withheld.batch, withheld.entries),
                    prune,
                    _STATE_OF[type(outcome)].value,
                    _encoded(outcome),
                )
            except RedisError as error:
                log.info("task %s: finishing in one round trip failed (%s)", task_id, error)
            else:
                if appended is not None:
                    sink.record(appended)
                return await self._settled(session_id, outcome, settlement, lease, run_ended=True)
        if withheld is not None:
            await sink.send(withheld)
        await self._prune(session_id, lease)
        return await self._settle(session_id, outcome, lease, run_ended=True)

    async def _settle(
        self, session_id: str, outcome: TaskOutcome, lease: str, *, run_ended: bool
    ) -> bool:
        """Settle; whether the session has been released (its thread must go)."""
        settlement = await self._settle_retrying(
            session_id, outcome, _encoded(outcome), lease=lease, run_ended=run_ended
        )
        return await self._settled(session_id, outcome, settlement, lease, run_ended=run_ended)

    async def _settled(
        self,
        session_id: str,
        outcome: TaskOutcome,
        settlement: Settlement,
        lease: str,
        *,
        run_ended: bool,
    ) -> bool:
        """Act on a settle's result; whether the session has been released."""
        if settlement.result is SettleResult.STALE:
            log.warning("task %s: settle refused, the lease was taken over", outcome.task_id)
        elif settlement.result is SettleResult.TERMINAL and run_ended:
            # Settled elsewhere (cleanup bound): the run has ended now, free the session.
            promoted = await self._store.release(session_id, outcome.task_id.value, lease)
            await self._start_promoted(promoted, session_id)
        await self._start_promoted(settlement.promoted, session_id)
        return settlement.session_released

    async def _start_promoted(self, task_id: str, session_id: str) -> None:
        """Publish the run of the task the settle promoted from the session's queue. A
        failure is logged: the sweeper publishes it after its hold-off (see promote())."""
        if not task_id or self._publish is None:
            return
        try:
            await self._publish(task_id, session_id)
        except Exception:
            log.exception("publishing queued task %s failed; the sweeper will", task_id)

    async def _settle_retrying(
        self,
        session_id: str,
        outcome: TaskOutcome,
        encoded: dict[str, object],
        *,
        lease: str,
        run_ended: bool,
    ) -> Settlement:
        """Settle, retrying through a Redis outage while the lease may still be ours.

        Settling is idempotent: a repeat of a settle that landed (its reply lost) finds
        the task terminal and returns the stored outcome."""
        outage = Outage(
            f"task {outcome.task_id.value}: settle", window=self._settings.lease_ttl, logger=log
        )
        while True:
            try:
                return await self._store.settle(
                    session_id,
                    outcome.task_id.value,
                    _STATE_OF[type(outcome)].value,
                    encoded,
                    lease=lease,
                    run_ended=run_ended,
                )
            except CONNECTION_ERRORS as error:
                if outage.exhausted():
                    raise
                await outage.back_off(error)

    async def _outlive(self, execution: asyncio.Task[TurnResult], lease: SessionLease) -> None:
        """Wait for a graph run that outlived its cancellation budget (its task is settled;
        it keeps the session's lease while it runs). Once the lease is lost it is
        cancelled again; its writes are refused either way."""
        lost = asyncio.create_task(lease.lost.wait())
        try:
            await asyncio.wait({execution, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
        if not execution.done():
            self._graphs.calls.cancel(lease.task_id)
            execution.cancel()
        with contextlib.suppress(BaseException):
            await execution

    async def _hand_back(self, sink: EventSink, lease: SessionLease) -> None:
        """The worker is stopping and the graph run has ended unsettled: write the events
        it emitted (the worker's stop may have cancelled the flusher too: entries it could
        not write are superseded by the next run anyway) and hand the lease back, so the
        requeued message is claimed at once and not counted as a lost delivery."""
        budget = self._settings.cleanup_per_task.total_seconds()
        try:
            await asyncio.wait_for(sink.drain(), budget)
        except (Exception, asyncio.CancelledError):
            log.warning("task %s: events not all written while handing back", lease.task_id)
        try:
            await lease.hand_back()
        except Exception:
            log.exception("task %s: the lease could not be handed back", lease.task_id)
        else:
            log.info("task %s handed back; lease %s released", lease.task_id, lease.value)

    async def _prune(self, session_id: str, lease: str) -> None:
        """Keep the thread to its latest checkpoints while this run still holds the lease
        (before settling frees it). A failure costs storage, never the outcome."""
        if self._pruner is None:
            return
        try:
            await self._pruner.prune(session_id, lease)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pruning the checkpoints of session %s failed", session_id)

    async def _delete_released_thread(self, session_id: str) -> None:
        """The session was released while this run went on: its last writes must go too."""
        try:
            await self._delete_thread(self._store.keys.thread_id(session_id))
        except Exception:
            log.exception("deleting the checkpoint thread of released session %s", session_id)


class ThreadDeleter:
    async def __call__(self, thread_id: str) -> None:
        raise NotImplementedError


class _OutlivedBudget(Exception):
    def __init__(self, outcome: TaskOutcome, execution: asyncio.Task[TurnResult]) -> None:
        super().__init__("graph run outlived its cancellation budget")
        self.outcome = outcome
        self.execution = execution


async def _shielded(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run ``coroutine`` to its end even if the caller is cancelled meanwhile (again)."""
    task = asyncio.ensure_future(coroutine)
    while not task.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)


async def _first_of(*events: asyncio.Event) -> None:
    waiters = [asyncio.create_task(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _failed(task: TaskId, error: BaseException) -> Failed:
    return Failed(task, FailureKind.UNKNOWN, str(error) or type(error).__name__, error)


_TURN_RESUMES = 3
"""How many times one delivery runs its turn again after Redis was lost mid-turn; a
Redis that keeps failing the turn after that ends it ``Failed``, with the error."""


def _interrupted_by_redis(execution: asyncio.Task[Any]) -> bool:
    """Whether the turn ended with an error saying Redis could not be reached, itself or
    as the cause of another (redisvl raises ``RedisSearchError`` from the connection
    error of a checkpoint search)."""
    if not execution.done() or execution.cancelled():
        return False
    return connection_lost(execution.exception())


def connection_lost(error: BaseException | None) -> bool:
    """Whether ``error``, or an error it was raised from, is a lost Redis connection."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, CONNECTION_ERRORS):
            return True
        seen.add(id(error))
        error = error.__cause__
    return False


def _settled_result(
    task: TaskId,
    execution: asyncio.Task[TurnResult],
    profile: AgentProfile,
    model_started: bool,
    resumed: bool,
    translator: TurnTranslator,
) -> TaskOutcome | Pause | None:
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
        return _failed(task, error)
    result = execution.result()
    if result.asks:
        return Pause(result.asks, result.usage)
    if result.halt is not None:
        partial = None if result.text is None else TextOutput(result.text, complete=False)
        if result.halt.reason is HaltReason.BUDGET_EXCEEDED:
            return Failed(
                task,
                FailureKind.BUDGET_EXCEEDED,
                result.halt.detail,
                output=partial,
                usage=result.usage,
            )
        return Completed(task, _HALT_STOP[result.halt.reason], partial, result.usage)
    output = None if result.text is None else TextOutput(result.text)
    return Completed(task, result.stop_reason, output, result.usage)


_HALT_STOP = {
    HaltReason.ITERATION_LIMIT: StopReason.ITERATION_LIMIT,
    HaltReason.LOOP_DETECTED: StopReason.LOOP_DETECTED,
}


__all__ = ["GraphProvider", "LiveRun", "TaskRunner", "ThreadDeleter"]
