"""Execute one AHP task: a claimed delivery's turn under its fenced lease, to its outcome.

The runner reads the task and its session, runs the graph turn (again after a Redis
outage mid-turn, from the last checkpoint), pauses the task when the turn asks the caller,
and hands the outcome to the settler (``workers.settling``); the turn itself is supervised
by ``workers.supervision`` (gates, cancellation, the cleanup budget). A worker that stops
mid-run hands the lease back so the next worker resumes at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from agent_harness_protocol import (
    AgentUsage,
    Cancelled,
    DiagnosticsRequirement,
    TaskId,
    TaskOutcome,
    TaskState,
    Warning,
    WarningKind,
)

from wire.backoff import connection_lost
from wire.codec import (
    dumps,
    loads,
    run_metadata_from_json,
    spec_from_json,
    task_input_from_json,
    usage_from_json,
    usage_to_json,
)
from wire.event_codec import SEMANTIC, event_to_entry
from wire.narrowing import narrowing_of
from wire.profiles import AgentProfile
from wire.records import SessionField, TaskField
from wire.settings import Settings
from wire.store import HANDED_BACK, PauseResult, RecordStore
from wire.structured_output import parse_schema
from wire.tracing_context import active

from . import spans
from .append_batcher import Appender
from .approval_route import APPROVAL_METADATA
from .claimer import ClaimedRun
from .errors import ProfileMismatchError
from .event_sink import EventSink
from .graph import AgentGraph, ModelCalls
from .hand_back import hand_back
from .interrupts import Pause, resume_values
from .lease import SessionLease
from .lease_renewer import LeaseRenewer
from .live_run import LiveRun
from .pruning import CheckpointPruner
from .redis_outages import TURN_RESUMES, cancel_known, interrupted_by_redis, resume_after_redis
from .settling import Publish, Settler, ThreadDeleter
from .structured import judged, system_prompt
from .supervision import OutlivedBudget, TurnSupervisor, failed
from .turn import TurnTranslator, run_turn

log = logging.getLogger(__name__)


class GraphProvider:
    """Builds (once) the compiled graph of each profile; tracks their model calls."""

    calls: ModelCalls

    async def graph(self, profile: AgentProfile) -> AgentGraph:
        raise NotImplementedError


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
        self._renewer = renewer
        self._appender: Appender = appender or store
        self._settler = Settler(
            settings=settings,
            store=store,
            delete_thread=delete_thread,
            pruner=pruner,
            publish=publish,
        )
        self._supervisor = TurnSupervisor(graphs.calls, store, settings.cleanup_per_task)

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
            if active():
                with spans.settling(task_id, type(outcome).__name__.lower()):
                    released = await self._settler.finish(
                        session_id, outcome, lease.value, sink, withheld
                    )
            else:
                released = await self._settler.finish(
                    session_id, outcome, lease.value, sink, withheld
                )
        except OutlivedBudget as outlived:
            run_ended = False
            await sink.drain()
            # Not ``lease.ending()``: the run goes on under its lease, and must stop
            # when the renewer finds the lease lost.
            await self._settler.settle(session_id, outlived.outcome, lease.value, run_ended=False)
            await self._supervisor.outlive(outlived.execution, lease)
        except asyncio.CancelledError:
            if live.handed_back:
                await hand_back(sink, lease, self._settings.cleanup_per_task)
            raise
        finally:
            await lease.stop()
            if not run_ended:
                await self._settler.start_promoted(await lease.release(), session_id)
                record_now = await self._store.session_record(session_id)
                # Released: closed and not persistent, or already forgotten (no record).
                released = not record_now or (
                    record_now.get(SessionField.CLOSED) == "1"
                    and record_now.get(SessionField.PERSISTENT) != "1"
                )
            if released:
                await self._settler.delete_released_thread(session_id)

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
            return failed(task, error)
        metadata = {
            **labels,
            "ahp_task_id": live.task_id,
            "ahp_session_id": session_id,
            # How the session wants approval-gated tool calls decided (the approval route).
            APPROVAL_METADATA: spec.requirements.approval.value,
        }
        self._graphs.calls.guard(live.task_id, lambda: self._supervisor.cancel_gate(live, lease))
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
                    return failed(task, error)
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
                    outcome = await self._supervisor.supervise(
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
                if not interrupted_by_redis(execution) or interruptions >= TURN_RESUMES:
                    return outcome
                interruptions += 1
                if await resume_after_redis(
                    self._settings, self._store, live, lease, sink, execution
                ):
                    resumed = True
                    continue
                if lease.lost.is_set():
                    return None  # the new holder settles
                if await cancel_known(self._store, live):
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
        await self._settler.prune(lease.session_id, lease.value)
        await lease.stop()
        result = await self._store.pause(
            lease.session_id,
            task_id,
            lease.value,
            dumps(usage_to_json(pause.usage)),
            [(ask.interaction_id, dumps(ask.to_json())) for ask in pause.payloads],
        )
        if result is PauseResult.PAUSED:
            if active():
                spans.paused([ask.interaction_id for ask in pause.payloads])
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


__all__ = ["GraphProvider", "TaskRunner"]
