"""Execute one AHP task: claim, fenced lease, graph turn, events, settle exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from agent_harness_protocol import (
    AgentUsage,
    Cancelled,
    Completed,
    DiagnosticsRequirement,
    Failed,
    FailureKind,
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
from redis.exceptions import TimeoutError as RedisTimeoutError

from wire.codec import (
    SEMANTIC,
    RemoteCause,
    event_to_entry,
    loads,
    outcome_to_json,
    run_metadata_from_json,
    spec_from_json,
    usage_from_json,
)
from wire.keys import is_valid_id
from wire.profiles import AgentProfile, CancellationSemantics
from wire.settings import Settings
from wire.store import HANDED_BACK, ClaimResult, RecordStore, Settlement, SettleResult

from .checkpoints import HeldLease, LeaseRegistry
from .errors import (
    ModelCallCancelledError,
    ProfileMismatchError,
    RunCancelledError,
    StaleLeaseError,
)
from .event_sink import EventSink
from .graph import ModelCalls, ModelGraph
from .loss import loss_policy
from .turn import TurnResult, TurnTranslator, run_turn

log = logging.getLogger(__name__)


@dataclass(eq=False)
class LiveRun:
    """A run of this process, reachable by the cancellation listener."""

    task_id: str
    cancel_requested: asyncio.Event = field(default_factory=asyncio.Event)
    lease_lost: asyncio.Event = field(default_factory=asyncio.Event)
    handed_back: bool = False
    """The worker is stopping and the graph run ended unsettled: the lease is handed back
    so the redelivered message resumes the task at once."""


class GraphProvider:
    """Builds (once) the compiled graph of each profile; tracks their model calls."""

    calls: ModelCalls

    async def graph(self, profile: AgentProfile) -> ModelGraph:
        raise NotImplementedError


_STATE_OF = {
    Completed: TaskState.COMPLETED,
    Failed: TaskState.FAILED,
    Cancelled: TaskState.CANCELLED,
    Unresolved: TaskState.UNRESOLVED,
}


class TaskRunner:
    def __init__(
        self,
        *,
        settings: Settings,
        store: RecordStore,
        profiles: Mapping[str, AgentProfile],
        graphs: GraphProvider,
        leases: LeaseRegistry,
        runs: dict[str, LiveRun],
        token: str,
        delete_thread: ThreadDeleter,
    ) -> None:
        self._settings = settings
        self._store = store
        self._profiles = profiles
        self._graphs = graphs
        self._leases = leases
        self._runs = runs
        self._token = token
        self._delete_thread = delete_thread
        self._lease_ms = int(settings.lease_ttl.total_seconds() * 1000)

    async def run(self, task_id: str, session_id: str | None = None) -> None:
        """Run one delivered message; ``session_id`` saves a lookup when the message has it."""
        if not is_valid_id(task_id) or (session_id is not None and not is_valid_id(session_id)):
            log.error("refusing a message with invalid ids %r / %r", task_id, session_id)
            return
        if session_id is None:
            session_id = (await self._store.task_record(task_id)).get("session", "")
            if not session_id:
                log.warning("task %s has no record; message dropped", task_id)
                return
        live = LiveRun(task_id)
        self._runs[task_id] = live
        try:
            policy = loss_policy(self._settings, TaskId(task_id))
            claim = await self._store.claim(
                session_id, task_id, self._token, self._lease_ms, policy
            )
            if claim.result is not ClaimResult.CLAIMED:
                log.info("task %s not run: %s", task_id, claim.result.value)
                return
            handed_back = claim.previous_state == HANDED_BACK
            resumed = handed_back or claim.previous_state == TaskState.RUNNING.value
            await self._run_claimed(
                live,
                session_id,
                claim.task,
                claim.session,
                claim.lease,
                resumed=resumed,
                handed_back=handed_back,
            )
        finally:
            self._runs.pop(task_id, None)

    async def _run_claimed(
        self,
        live: LiveRun,
        session_id: str,
        record: Mapping[str, str],
        session: Mapping[str, str],
        lease: str,
        *,
        resumed: bool,
        handed_back: bool = False,
    ) -> None:
        task_id = live.task_id
        held = HeldLease(session_id, lease)
        thread_id = self._store.keys.thread_id(session_id)
        self._leases.register(thread_id, held)
        sink = EventSink(self._store, session_id, task_id, lease)
        sink.start()
        if resumed:
            what = "stopped and handed it back" if handed_back else "was lost"
            tag, payload = event_to_entry(
                Warning(
                    TaskId(task_id),
                    WarningKind.RECOVERABLE,
                    f"the worker running this task {what}; resuming from the session's "
                    f"last checkpoint (delivery {record.get('deliveries', '?')}); output "
                    "streamed before is superseded and usage is unknown",
                )
            )
            sink.emit(SEMANTIC, tag, payload)
        renewer = asyncio.create_task(self._renew(live, session_id, lease))
        run_ended = True
        released = False
        try:
            outcome = await self._outcome(live, session_id, record, session, sink, resumed)
            await sink.drain()
            if outcome is None or sink.lease_lost or live.lease_lost.is_set():
                log.warning(
                    "task %s lost its lease; its outcome is left to the new holder", task_id
                )
                return
            released = await self._settle(session_id, outcome, lease, run_ended=True)
        except _OutlivedBudget as outlived:
            run_ended = False
            await sink.drain()
            await self._settle(session_id, outlived.outcome, lease, run_ended=False)
            with contextlib.suppress(BaseException):
                await outlived.execution
        except asyncio.CancelledError:
            if live.handed_back:
                # The worker's stop may have cancelled the sink's flusher too: entries it
                # could not write are superseded by the next run anyway.
                with contextlib.suppress(BaseException):
                    await asyncio.shield(sink.drain())
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._store.hand_back(session_id, task_id, lease))
            raise
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            self._leases.unregister(thread_id, held)
            if not run_ended:
                await self._store.release(session_id, task_id, lease)
                record_now = await self._store.session_record(session_id)
                released = record_now.get("closed") == "1" and record_now.get("persistent") != "1"
            if released:
                await self._delete_released_thread(session_id)

    async def _outcome(
        self,
        live: LiveRun,
        session_id: str,
        record: Mapping[str, str],
        session: Mapping[str, str],
        sink: EventSink,
        resumed: bool,
    ) -> TaskOutcome | None:
        task = TaskId(live.task_id)
        try:
            profile = self._profile_for(session)
            spec = spec_from_json(loads(session["spec"]))
            text = str(loads(record["input"])["text"])
            session_usage = usage_from_json(loads(session.get("usage") or "{}"))
            labels = run_metadata_from_json(session.get("metadata", ""))
            graph = await self._graphs.graph(profile)
        except Exception as error:
            return _failed(task, error)
        translator = TurnTranslator(
            task,
            sink,
            session_usage,
            diagnostics=spec.requirements.diagnostics is DiagnosticsRequirement.REQUIRED,
            usage_known=not resumed,
        )
        metadata = {**labels, "ahp_task_id": live.task_id, "ahp_session_id": session_id}
        self._graphs.calls.guard(live.task_id, lambda: self._cancel_gate(live))
        execution = asyncio.create_task(
            run_turn(
                graph,
                translator,
                self._store.keys.thread_id(session_id),
                text,
                spec.instructions,
                metadata,
                resumed=resumed,
            )
        )
        try:
            return await self._supervise(task, live, profile, execution, resumed)
        except asyncio.CancelledError:
            # The worker is stopping mid-run: end the graph run before handing it back.
            execution.cancel()
            await asyncio.wait({execution}, timeout=self._settings.cleanup_per_task.total_seconds())
            live.handed_back = execution.done()
            raise
        finally:
            self._graphs.calls.forget(live.task_id)

    def _profile_for(self, session: Mapping[str, str]) -> AgentProfile:
        name = session.get("profile", "")
        profile = self._profiles.get(name)
        if profile is None:
            raise ProfileMismatchError(f"this worker has no profile {name!r}")
        if profile.digest != session.get("profile_digest"):
            raise ProfileMismatchError(
                f"profile {name!r} differs between the caller and this worker; "
                "deploy the same profile registry to both"
            )
        return profile

    async def _cancel_gate(self, live: LiveRun) -> None:
        """Step boundary before the model is invoked: a cancellation recorded by now
        wins, even one whose ``CancelledError`` was swallowed (redis-py's ``wait_for`` on
        Python 3.11) or whose message this process missed. One HGET, none once the
        in-memory signal is set. Unreadable (Redis restarting): the signal, the renewer
        and the listener still deliver it to the model call."""
        if not live.cancel_requested.is_set():
            try:
                if await self._store.cancel_recorded(live.task_id):
                    live.cancel_requested.set()
            except (RedisConnectionError, RedisTimeoutError) as error:
                log.warning("task %s: cancel flag unreadable (%s)", live.task_id, error)
        if live.cancel_requested.is_set():
            raise RunCancelledError(f"task {live.task_id}: cancelled before the model call")

    async def _supervise(
        self,
        task: TaskId,
        live: LiveRun,
        profile: AgentProfile,
        execution: asyncio.Task[TurnResult],
        resumed: bool,
    ) -> TaskOutcome | None:
        stop = asyncio.create_task(_first_of(live.cancel_requested, live.lease_lost))
        try:
            await asyncio.wait({execution, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        model_started = self._graphs.calls.started(live.task_id)
        if execution.done():
            return _settled_result(task, execution, profile, model_started, resumed)
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
                task, execution, profile, self._graphs.calls.started(live.task_id), resumed
            )
        raise _OutlivedBudget(
            Unresolved(
                task,
                UnresolvedReason.CANCELLATION_UNCONFIRMED,
                "the graph run did not end within the per-task budget after cancellation",
            ),
            execution,
        )

    async def _settle(
        self, session_id: str, outcome: TaskOutcome, lease: str, *, run_ended: bool
    ) -> bool:
        """Settle; whether the session has been released (its thread must go)."""
        cause = outcome.cause if isinstance(outcome, Failed) else None
        encoded = outcome_to_json(outcome, RemoteCause.of(cause) if cause is not None else None)
        settlement = await self._settle_retrying(
            session_id, outcome, encoded, lease=lease, run_ended=run_ended
        )
        if settlement.result is SettleResult.STALE:
            log.warning("task %s: settle refused, the lease was taken over", outcome.task_id)
        elif settlement.result is SettleResult.TERMINAL and run_ended:
            # Settled elsewhere (cleanup bound): the run has ended now, free the session.
            await self._store.release(session_id, outcome.task_id.value, lease)
        return settlement.session_released

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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.lease_ttl.total_seconds()
        pause = 0.05
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
            except (RedisConnectionError, RedisTimeoutError):
                if loop.time() >= deadline:
                    raise
                log.warning(
                    "task %s: settle failed on a lost connection; retrying", outcome.task_id
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    async def _renew(self, live: LiveRun, session_id: str, lease: str) -> None:
        """Extend the lease every third of its TTL and read the durable cancel flag.

        The claim has just set a full TTL, and the run was registered for cancellation
        messages before it claimed, so the first renewal waits one interval."""
        ttl = self._settings.lease_ttl.total_seconds()
        interval = max(ttl / 3, 0.05)
        loop = asyncio.get_running_loop()
        renewed_at = loop.time()
        pause = interval
        while True:
            await asyncio.sleep(pause)
            pause = interval
            try:
                held, cancel = await self._store.renew(
                    session_id, live.task_id, lease, self._lease_ms
                )
            except (RedisConnectionError, RedisTimeoutError):
                # Redis is unreachable (restarting): retry soon while the lease may still
                # be ours; once it may have lapsed, another worker may hold it.
                if loop.time() - renewed_at < ttl:
                    log.warning("task %s could not renew its lease; retrying", live.task_id)
                    pause = min(0.2, interval)
                    continue
                held, cancel = False, False
            renewed_at = loop.time()
            if not held:
                live.lease_lost.set()
                return
            if cancel:
                live.cancel_requested.set()

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


async def _first_of(*events: asyncio.Event) -> None:
    waiters = [asyncio.create_task(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _failed(task: TaskId, error: BaseException) -> Failed:
    return Failed(task, FailureKind.UNKNOWN, str(error) or type(error).__name__, error)


def _settled_result(
    task: TaskId,
    execution: asyncio.Task[TurnResult],
    profile: AgentProfile,
    model_started: bool,
    resumed: bool,
) -> TaskOutcome | None:
    cancelled = execution.cancelled() or isinstance(
        execution.exception(), ModelCallCancelledError | RunCancelledError
    )
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
    output = None if result.text is None else TextOutput(result.text)
    return Completed(task, result.stop_reason, output, result.usage)


__all__ = ["GraphProvider", "LiveRun", "TaskRunner", "ThreadDeleter"]
