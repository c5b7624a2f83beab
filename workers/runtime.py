"""One long-lived event loop per worker process, with its Redis clients and saver, and
the wiring of the runner, the sweeper and the control loops (``workers.control``).

Celery runs task functions synchronously (prefork children, or pool threads). Each
process owns one background thread running one asyncio loop; every Redis client, the
checkpointer and the compiled graphs are created inside that loop and never used from
another one. A task function hands its coroutine to the loop and blocks on the result,
which costs far less than an ``asyncio.run`` per task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine, Mapping
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Any, TypeVar
from uuid import uuid4

from opentelemetry import context as otel_context
from redis.asyncio import BlockingConnectionPool, Redis

from wire.celery_config import START_PRIORITY
from wire.errors import RedisModulesMissingError
from wire.keys import Keys
from wire.modules import missing_modules
from wire.profiles import AgentProfile, load_profiles
from wire.queues import served_queues
from wire.redis_options import pool_options
from wire.settings import Settings
from wire.store import RecordStore
from wire.tracing_context import active
from wire.tracing_setup import configure_tracing, flush_tracing

from .admission import RunAdmission
from .append_batcher import AppendBatcher
from .approval_route import CallerApprovalRoute
from .checkpoints import FencedRedisSaver
from .claimer import DeliveryClaimer
from .control import CancelListener, MaintenanceConsumer
from .dispatcher import ParkedRunDispatcher
from .errors import FencingUnavailableError, RuntimeStoppedError
from .graph import AgentGraph, ModelCalls
from .import_cache import fail_fast_if_missing
from .lease_renewer import LeaseRenewer
from .live_run import LiveRun
from .loop_lag import LoopLag
from .models import build_model
from .presence import PresenceReporter, process_name
from .pruning import CheckpointPruner
from .question_tool import ask_caller_tool
from .republish import Republish, on_its_queue
from .run_summary import RunSummary, read_summary
from .runner import GraphProvider, TaskRunner
from .settling import ThreadDeleter
from .spans import DeliverySpan
from .steering import pipeline_middleware
from .sweeper import LeaseSweeper
from .tools import build_tools
from .tracing import inline_untraced_spans

log = logging.getLogger(__name__)
T = TypeVar("T")


def _pool(url: str, settings: Settings, *, decode: bool) -> BlockingConnectionPool:
    return BlockingConnectionPool.from_url(
        url,
        max_connections=settings.redis_max_connections,
        timeout=30,
        decode_responses=decode,
        health_check_interval=30,
        **pool_options(),  # reconnect connections a restarted Redis closed
    )


class _Graphs(GraphProvider):
    def __init__(self, saver: FencedRedisSaver, store: RecordStore) -> None:
        self._saver = saver
        self._approvals = CallerApprovalRoute(store)
        self._graphs: dict[str, AgentGraph] = {}
        self.calls = ModelCalls()

    async def graph(self, profile: AgentProfile) -> AgentGraph:
        graph = self._graphs.get(profile.digest)
        if graph is None:
            tools = build_tools(profile.tools)
            if profile.questions:
                tools.append(ask_caller_tool())  # global: visible in every pipeline step
            steering = (
                ()
                if profile.pipeline is None
                else pipeline_middleware(profile.pipeline, {tool.name: tool for tool in tools})
            )
            graph = AgentGraph(
                build_model(profile.model),
                tools,
                profile,
                self._saver,
                self.calls,
                approvals=self._approvals,
                steering=steering,
            )
            self._graphs[profile.digest] = graph
        return graph


class _Deleter(ThreadDeleter):
    def __init__(self, saver: FencedRedisSaver) -> None:
        self._saver = saver

    async def __call__(self, thread_id: str) -> None:
        await self._saver.adelete_thread(thread_id)


class _LoopState:
    """Everything that lives inside the worker loop."""

    def __init__(
        self,
        settings: Settings,
        profiles: Mapping[str, AgentProfile],
        republish: Republish | None,
        queues: tuple[str, ...],
    ) -> None:
        self.settings = settings
        if settings.effective_checkpoint_url != settings.redis_url:
            raise FencingUnavailableError(
                "AHP_CHECKPOINT_URL must name the Redis of AHP_REDIS_URL (or be unset): "
                "checkpoint writes are fenced by the session lease in one atomic script, "
                "so the checkpoints and the leases must live in one Redis"
            )
        self.keys = Keys(settings.namespace)
        self.redis = Redis(connection_pool=_pool(settings.redis_url, settings, decode=True))
        self.store = RecordStore(self.redis, self.keys, settings.task_retention)
        self.checkpoint_redis = Redis(
            connection_pool=_pool(settings.effective_checkpoint_url, settings, decode=False)
        )
        self.saver = FencedRedisSaver(redis_client=self.checkpoint_redis)
        self.runs: dict[str, LiveRun] = {}
        self.token = uuid4().hex
        self.deleter = _Deleter(self.saver)
        self.renewer = LeaseRenewer(settings.redis_url, self.keys, settings.lease_ttl)
        self.appends = AppendBatcher(self.redis, self.store)
        self.runner = TaskRunner(
            settings=settings,
            store=self.store,
            profiles=profiles,
            graphs=_Graphs(self.saver, self.store),
            runs=self.runs,
            delete_thread=self.deleter,
            pruner=CheckpointPruner(
                self.saver,
                self.checkpoint_redis,
                self.store,
                settings.checkpoints_kept,
            ),
            publish=(
                on_its_queue(republish, self.store, settings.queue, START_PRIORITY)
                if republish is not None
                else None
            ),
            renewer=self.renewer,
            appender=self.appends,
        )
        self.claimer = DeliveryClaimer(
            settings, self.store, self.token, self.renewer, asyncio.get_running_loop()
        )
        self.cancel_listener = CancelListener(self.redis, self.keys, self.runs)
        self.maintenance = MaintenanceConsumer(
            self.redis,
            self.keys,
            self.token,
            self.deleter,
            liveness=settings.lease_ttl.total_seconds(),
        )
        self.background: list[asyncio.Task[None]] = []
        self.sweeper: LeaseSweeper | None = None
        self.dispatcher: ParkedRunDispatcher | None = None
        if republish is not None:
            self.dispatcher = ParkedRunDispatcher(self.redis, self.keys, republish, settings.queue)
            self.sweeper = LeaseSweeper(
                settings,
                self.store,
                on_its_queue(republish, self.store, settings.queue),
                queues,
            )

    async def open(self) -> None:
        missing = await missing_modules(
            self.checkpoint_redis, self.settings.effective_checkpoint_url
        )
        if missing is not None:
            raise RedisModulesMissingError(missing)
        # redisvl says "Index already exists, not overwriting." at INFO for each of the
        # saver's indices on every start after the first: not news, so not logged.
        logging.getLogger("redisvl.index.index").setLevel(logging.WARNING)
        await self.saver.asetup()
        self.renewer.start()
        if self.sweeper is not None:
            self.background.append(asyncio.create_task(self.sweeper.serve()))
        if self.dispatcher is not None:
            self.background.append(asyncio.create_task(self.dispatcher.serve()))
        self.background.append(asyncio.create_task(self.cancel_listener.serve()))
        self.background.append(asyncio.create_task(self.maintenance.serve()))

    async def stop_runs(self) -> None:
        """Cancel the runs in progress and wait for them (each hands its lease back once
        its graph run has ended), before anything they need is torn down."""
        runs = [run.task for run in self.runs.values() if run.task is not None]
        for task in runs:
            task.cancel()
        if runs:
            budget = self.settings.cleanup_per_task.total_seconds()
            await asyncio.wait(runs, timeout=2 * budget + 3)

    async def close(self) -> None:
        for task in self.background:
            task.cancel()
        for task in self.background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        # Unanswered maintenance requests go back on the queue for another worker.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.maintenance.leave(), timeout=2)
        await self.appends.aclose()
        await asyncio.to_thread(self.renewer.stop)
        await asyncio.to_thread(self.claimer.close)
        for client in (self.redis, self.checkpoint_redis):
            await client.aclose()
            await client.connection_pool.disconnect()


async def _cancel_runs() -> None:
    current = asyncio.current_task()
    runs = [task for task in asyncio.all_tasks() if task is not current]
    for task in runs:
        task.cancel()
    if runs:
        await asyncio.wait(runs, timeout=5)


class WorkerRuntime:
    """The per-process loop thread. Thread-safe; start it once per process."""

    def __init__(
        self,
        settings: Settings,
        profiles: Mapping[str, AgentProfile] | None = None,
        *,
        republish: Republish | None = None,
    ):
        """``republish(task_id, session_id, queue)`` publishes a run message again (from a
        worker thread); without it this process does not sweep for lost tasks."""
        fail_fast_if_missing("langchain.schema")
        inline_untraced_spans()
        self.settings = settings
        self._republish = republish
        self.profiles = profiles if profiles is not None else load_profiles(settings.profiles)
        self.queues: tuple[str, ...] = served_queues(settings)
        """The broker queues this process serves, whose unclaimed starts its sweeper
        judges; the Celery worker sets them to the queues it consumes before the loop
        starts (``workers.celery_app``)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._state: _LoopState | None = None
        self._lock = threading.Lock()
        self._stopping = False
        self._stopped = threading.Event()
        self._lag: LoopLag | None = None
        self._admission: RunAdmission | None = None
        self.slots = settings.worker_runs
        """Runs this process carries at once, as it reports itself (``workers.presence``):
        the Celery worker sets its concurrency, a prefork child 1."""
        self.node: str | None = None
        """The Celery node name this process works for (its presence's name)."""
        self._presence: PresenceReporter | None = None

    @property
    def started(self) -> bool:
        return self._loop is not None

    def start(self) -> None:
        with self._lock:
            if self._loop is not None:
                return
            # OpenTelemetry's SDK from OTEL_* when AHP_TRACING asks for it (in the process
            # that runs the tasks: after a prefork child forked).
            configure_tracing(self.settings, "ahp-worker")
            loop = asyncio.new_event_loop()
            # Blocking work (sync tools, a local model, ``asyncio.to_thread``) runs here,
            # bounded, never on the loop.
            loop.set_default_executor(
                ThreadPoolExecutor(
                    max_workers=self.settings.worker_blocking_threads,
                    thread_name_prefix="ahp-blocking",
                )
            )
            ready: Future[None] = Future()
            thread = threading.Thread(
                target=self._serve, args=(loop, ready), name="ahp-worker-loop", daemon=True
            )
            thread.start()
            ready.result(timeout=60)
            self._loop, self._thread = loop, thread
            self._stopped.clear()
            self._lag = LoopLag(loop)
            self._lag.start()
            self._admission = RunAdmission(
                self._lag, self.settings.worker_max_loop_lag.total_seconds()
            )
            self._presence = PresenceReporter(
                self.settings.redis_url,
                Keys(self.settings.namespace),
                name=process_name(self.node),
                queues=self.queues,
                slots=self.slots,
                in_flight=self.runs_in_flight,
            )
            self._presence.start()

    def runs_in_flight(self) -> int:
        """Runs this process carries now."""
        state = self._state
        return 0 if state is None else len(state.runs)

    def _serve(self, loop: asyncio.AbstractEventLoop, ready: Future[None]) -> None:
        asyncio.set_event_loop(loop)

        async def open_state() -> None:
            state = _LoopState(self.settings, self.profiles, self._republish, self.queues)
            await state.open()
            self._state = state

        try:
            loop.run_until_complete(open_state())
        except BaseException as error:
            ready.set_exception(error)
            loop.close()
            return
        ready.set_result(None)
        loop.run_forever()
        loop.close()

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the worker loop and block until it returns."""
        self.start()
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except CancelledError:
            if self._stopping:
                raise RuntimeStoppedError("the worker runtime stopped during the run") from None
            raise

    def run_task(
        self,
        task_id: str,
        session_id: str | None = None,
        *,
        queue: str | None = None,
        trace_headers: Mapping[str, object] | None = None,
    ) -> RunSummary:
        """Run one delivered message; the task record's state and outcome once it ended.

        Called from the pool thread holding the delivery, which parks here while the run
        goes on on the loop. It waits first for admission (``workers.admission``): not
        while the loop lags, and only a bounded number of runs starting at once.

        While tracing, the delivery is a ``process <queue>`` span continuing the trace its
        message's ``trace_headers`` (or the task record) name (``workers.spans``)."""
        self.start()
        state, admission = self._state, self._admission
        assert state is not None
        assert admission is not None
        delivery = DeliverySpan(task_id, queue, trace_headers or {}) if active() else None
        ticket = admission.admit(self._stopped)
        if ticket is None:
            raise RuntimeStoppedError("the worker runtime stopped before the run started")
        claim_began = time.time_ns() if delivery is not None else 0
        try:
            claimed = state.claimer.claim(task_id, session_id)
        finally:
            ticket.started()  # the lease is with the renewer (or there is nothing to run)
        if delivery is None:

            async def run_then_summarise() -> RunSummary:
                if claimed is not None:
                    await state.runner.run_claimed(claimed)
                return await read_summary(state.store, task_id)

            return self.call(run_then_summarise())
        try:
            delivery.claimed(claimed, claim_began)
        except Exception:  # tracing never fails a run
            log.exception("task %s: its delivery span could not be made", task_id)

        async def traced_run() -> RunSummary:
            token = otel_context.attach(delivery.context() or otel_context.get_current())
            try:
                if claimed is not None:
                    await state.runner.run_claimed(claimed)
                return await read_summary(state.store, task_id)
            finally:
                otel_context.detach(token)

        try:
            summary = self.call(traced_run())
        except BaseException as error:
            delivery.end(None, error)
            raise
        delivery.end(summary.to_json().get("ahp_outcome"))
        return summary

    def stop(self) -> None:
        """Close the loop. Runs still in progress are cancelled; their task functions
        raise ``RuntimeStoppedError`` so the message is handed back, not acknowledged."""
        with self._lock:
            loop, thread, state = self._loop, self._thread, self._state
            if loop is None or thread is None:
                return
            self._stopping = True
            self._stopped.set()
            if self._presence is not None:
                self._presence.stop()
                self._presence = None
            if self._lag is not None:
                self._lag.stop()
                self._lag = None
            if state is not None:
                # Runs first, while the event sinks, the lease scripts and the clients
                # they hand back through are still alive; then whatever is left.
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(state.stop_runs(), loop).result(timeout=10)
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_cancel_runs(), loop).result(timeout=10)
            if state is not None:
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(state.close(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            self._loop = self._thread = self._state = None
        flush_tracing()  # a prefork child exits without atexit
