"""``CeleryHarness``: the AHP port whose tasks run on a Celery worker pool."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from uuid import uuid4

from agent_harness_protocol import (
    AgentHarness,
    CleanupBudget,
    CompatibilityIssue,
    CompatibilityReport,
    IncompatibleRequirementError,
    InteractionRequest,
    PersistentSessionRef,
    PersistentSessions,
    ProviderId,
    SessionId,
    SessionSpec,
    StorageNamespace,
    SupportReport,
    TaskId,
    TaskState,
)

from wire.codec import loads, run_metadata_json, spec_from_json
from wire.keys import is_valid_id, require_valid_id
from wire.presence import live_workers, queue_gauges
from wire.profiles import AgentProfile, load_profiles, resolve_profile
from wire.provider import PROVIDER
from wire.queues import deployment_queues
from wire.records import SessionField, TaskField
from wire.settings import Settings

from .admission import support_report, validate_session
from .errors import (
    CheckpointCleanupError,
    UnknownSessionError,
)
from .info import (
    SessionInfo,
    TaskInfo,
    TaskMetrics,
    pending_requests,
    session_info,
    task_info,
)
from .lookups import owned_session_record, owned_task_record
from .redis_errors import reported
from .responses import ResponderFactory
from .runtime import CallerRuntime, PublisherFactory
from .session import CelerySession
from .session_opening import new_session, reopened_session
from .stream_reader import StreamReader
from .task import CeleryTask


def _observe(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()


class CeleryHarness(AgentHarness, PersistentSessions):
    """Delegate AHP tasks to Celery workers through Redis.

    Construction does no I/O; Redis clients open on first use inside the running event
    loop, and the harness must stay on that loop.

    Args:
        settings: The deployment's settings (default: from the environment).
        profile: The agent profile (or its name in the settings' registry) that workers
            run for this harness's sessions.
        profiles: The registry to resolve a profile name in (default: the settings').
        publisher_factory: Builds the publisher of run messages (default: Celery to the
            settings' broker). A seam for tests that must control delivery.
        responder_factory: Builds the deliverer of responses to interactions (default:
            the respond script on the settings' Redis). A seam for tests that must
            control delivery.
        run_metadata: String labels stored with every session this harness creates and
            passed to each of its graph runs' LangChain config metadata (tracing tags,
            a test's scope). Keys starting with ``ahp_`` are reserved.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        profile: AgentProfile | str | None = None,
        profiles: Mapping[str, AgentProfile] | None = None,
        publisher_factory: PublisherFactory | None = None,
        responder_factory: ResponderFactory | None = None,
        run_metadata: Mapping[str, str] | None = None,
    ) -> None:
        self._settings = settings if settings is not None else Settings()
        self._run_metadata = run_metadata_json(run_metadata or {})
        self._publisher_factory = publisher_factory
        self._responder_factory = responder_factory
        if isinstance(profile, AgentProfile):
            self._profile = profile
        else:
            registry = profiles if profiles is not None else load_profiles(self._settings.profiles)
            self._profile = resolve_profile(
                registry, self._settings.profile if profile is None else profile
            )
        self._queues = (
            (self._settings.queue,)
            if isinstance(profile, AgentProfile)
            else deployment_queues(self._settings, registry)
        )
        self._budget = CleanupBudget(
            per_task=self._settings.cleanup_per_task,
            total=self._settings.cleanup_total,
            aggregates_across_resources=True,
        )
        self._runtime: CallerRuntime | None = None
        self._closed = False
        self._close_task: asyncio.Task[None] | None = None

    @property
    def profile(self) -> AgentProfile:
        return self._profile

    @property
    def settings(self) -> Settings:
        """The deployment's settings this harness runs with."""
        return self._settings

    @property
    def provider(self) -> ProviderId:
        return PROVIDER

    @property
    def support(self) -> SupportReport:
        return support_report(self._profile)

    @property
    def cleanup_budget(self) -> CleanupBudget:
        return self._budget

    def validate(self, spec: SessionSpec) -> CompatibilityReport:
        return validate_session(self._profile, spec)

    @property
    def stream_reader(self) -> StreamReader:
        """The one reader of every task stream this harness's handles follow, on one
        connection of its own; the HTTP API's event streams follow theirs through it too."""
        return self._open().reader

    def _open(self) -> CallerRuntime:
        if self._runtime is None:
            self._runtime = CallerRuntime.open(
                self._settings, self._profile, self._publisher_factory, self._responder_factory
            )
        return self._runtime

    async def create_session(
        self, spec: SessionSpec, *, tenant: str | None = None, single_task: bool = False
    ) -> CelerySession:
        """Admit ``spec`` and write the session record; no native work starts.

        A spec that requires persistence gets a persistent session: its
        ``persistent_ref`` reopens it from any process of the deployment. ``tenant``
        (beyond the AHP port) owns the session and its tasks: ``attach_*`` and the
        ``*_info`` reads answer another tenant as if they did not exist.

        ``single_task`` (beyond the AHP port) makes a session that takes one task and is
        released by the step that settles it, whoever runs that step (a worker, a
        cancelling caller, the sweeper after a lost worker): nothing is left behind even
        if this process dies before the task ends. A second ``start_task`` raises
        ``SessionBlockedError``. It cannot be persistent (``ValueError``).

        Raises:
            IncompatibleRequirementError: the spec cannot be served.
            HarnessTransportError: Redis could not be reached or refused the write
                (``maxmemory``); no session was created.
            RedisModulesMissingError: the deployment's Redis lacks the Query Engine or
                JSON that checkpoints need (also a ``HarnessTransportError``).
        """
        if self._closed:
            raise RuntimeError("harness is closed")
        if tenant is not None:
            require_valid_id("tenant", tenant)
        self.validate(spec).require_compatible()
        return await new_session(
            self._open(), spec, self._run_metadata, tenant=tenant or "", single_task=single_task
        )

    async def reopen_session(
        self, reference: PersistentSessionRef, spec: SessionSpec
    ) -> CelerySession:
        """Open a new handle on persistent context, from this or any other process.

        Handles of one context share its exclusion and blocking. ``spec`` may change the
        configuration (instructions) only while no other handle is open.

        Raises:
            ValueError: the reference belongs to another provider or namespace.
            UnknownPersistentSessionError: no such persistent context (nothing created).
            PersistentConfigurationError: another open handle uses a different
                configuration, or the context belongs to another agent profile.
            RedisModulesMissingError: the deployment's Redis lacks the Query Engine or
                JSON that checkpoints need (also a ``HarnessTransportError``).
            SessionBlockedError: a start of the context is unconfirmed, or a graph run
                outlived its settled task.
            SessionBusyError: a task of the context has not settled yet.
            StoredHistoryUnavailableError: the context's checkpoints are missing.
            HarnessTransportError: Redis could not be reached or refused the write.
        """
        if self._closed:
            raise RuntimeError("harness is closed")
        namespace = StorageNamespace(self._settings.namespace)
        if reference.provider != PROVIDER or reference.namespace != namespace:
            raise ValueError(
                f"reference of {reference.provider.value}/{reference.namespace.value} cannot be "
                f"reopened by {PROVIDER.value}/{namespace.value}"
            )
        if not is_valid_id(reference.id):
            raise ValueError(f"invalid persistent session id {reference.id!r}")
        if spec.requirements.persistence is None:
            raise IncompatibleRequirementError(
                [
                    CompatibilityIssue(
                        "requirements.persistence", "reopening needs a spec that requires it"
                    )
                ]
            )
        self.validate(spec).require_compatible()
        return await reopened_session(self._open(), reference.id, spec)

    # -- beyond the AHP port: handles and views by id, from any process ------------------
    async def attach_session(self, session_id: str, *, tenant: str | None = None) -> CelerySession:
        """A handle on an open session by its id, from any process of the deployment
        (the spec comes from its record). Its unsettled task, if any, becomes the
        handle's current task. A persistent session gets a handle of its own, as
        ``reopen_session`` would give, without changing its configuration.

        Raises:
            UnknownSessionError: no such open session for ``tenant`` (never created,
                released, a malformed id, or another tenant's: all answered alike).
            HarnessTransportError: Redis could not be reached.
        """
        if self._closed:
            raise RuntimeError("harness is closed")
        runtime = self._open()
        record = await owned_session_record(runtime, session_id, tenant)
        if record.get(SessionField.CLOSED) == "1":
            raise UnknownSessionError(session_id)
        spec = spec_from_json(loads(record[SessionField.SPEC]))
        handle_id = None
        if record.get(SessionField.PERSISTENT) == "1":
            handle_id = uuid4().hex
            with reported("the session handle was not opened"):
                await runtime.store.touch_handles(session_id, (handle_id,), runtime.handle_ttl_ms)
            runtime.track_handle(session_id, handle_id)
        session = CelerySession(
            runtime,
            SessionId(session_id),
            spec,
            handle_id=handle_id,
            tenant=record.get(SessionField.TENANT, ""),
        )
        active = record.get(SessionField.ACTIVE, "")
        if active:
            task = await self.attach_task(active)
            if not task.settled:
                session.adopt(task)
        runtime.sessions.add(session)
        return session

    async def attach_task(self, task_id: str, *, tenant: str | None = None) -> CeleryTask:
        """A handle on any retained task by its id, from any process: it follows the
        task's event stream from its first entry, so its ``events()``, ``state`` and
        ``await_outcome()`` report what every other handle reports.

        Raises:
            UnknownTaskError: no such task for ``tenant`` (never started, past its
                retention, a malformed id, or another tenant's: all answered alike).
            HarnessTransportError: Redis could not be reached.
        """
        if self._closed:
            raise RuntimeError("harness is closed")
        runtime = self._open()
        record = await owned_task_record(runtime, task_id, tenant)
        task = CeleryTask(
            runtime,
            SessionId(record[TaskField.SESSION]),
            TaskId(task_id),
            queued=record.get(TaskField.QUEUED) == "1",
        )
        task.start_reading()
        return task

    async def session_info(self, session_id: str, *, tenant: str | None = None) -> SessionInfo:
        """The session's record as a view (released non-persistent sessions are gone).

        Raises:
            UnknownSessionError: no such session for ``tenant``.
            HarnessTransportError: Redis could not be reached.
        """
        runtime = self._open()
        record = await owned_session_record(runtime, session_id, tenant)
        with reported("the session could not be read"):
            queued = await runtime.redis.lrange(runtime.keys.session_queue(session_id), 0, -1)
        return session_info(session_id, record, tuple(str(item) for item in queued))

    async def task_info(self, task_id: str, *, tenant: str | None = None) -> TaskInfo:
        """The task's record as a view; retained ``AHP_TASK_RETENTION`` after it settled.
        A task awaiting its caller lists the interactions it waits for.

        Raises:
            UnknownTaskError: no such task for ``tenant``.
            HarnessTransportError: Redis could not be reached.
        """
        runtime = self._open()
        record = await owned_task_record(runtime, task_id, tenant)
        pending: tuple[InteractionRequest, ...] = ()
        if record.get(TaskField.STATE) == TaskState.AWAITING_RESPONSE.value:
            with reported("the task could not be read"):
                raised, resolved = await runtime.store.interactions(task_id)
            pending = pending_requests(raised, resolved)
        return task_info(task_id, record, pending)

    async def task_metrics(self) -> TaskMetrics:
        """The pool's task figures: counters and histograms every process keeps in
        Redis, tasks starting and running now, and the broker's queue depth.

        Raises:
            HarnessTransportError: Redis could not be reached.
        """
        runtime = self._open()
        settings = self._settings
        with reported("the task metrics could not be read"):
            statistics = await runtime.store.task_statistics()
            starting, running = await runtime.store.active_counts()
            now_ms = int(time.time() * 1000)
            workers = await live_workers(runtime.redis, runtime.keys, now_ms)
            queues = await queue_gauges(
                runtime.redis,
                runtime.keys,
                self._queues,
                workers,
                now_ms,
                broker_is_redis=settings.effective_broker_url == settings.redis_url,
            )
        depth = next(gauge.waiting for gauge in queues if gauge.queue == settings.queue)
        return TaskMetrics(statistics, starting, running, depth, tuple(queues), tuple(workers))

    async def aclose(self) -> None:
        """Release every session within ``cleanup_budget.total``; idempotent and shielded.

        Raises:
            CheckpointCleanupError: stored context of some sessions may remain; every
                task is still settled and every handle closed.
        """
        if self._close_task is None:
            self._closed = True
            self._close_task = asyncio.create_task(self._close_all())
            self._close_task.add_done_callback(_observe)
        await asyncio.shield(self._close_task)

    async def detach(self) -> None:
        """Close this harness's clients and background readers without releasing its
        sessions: they stay open in Redis, with their tasks running on the workers, for
        any other process to attach (an API replica shutting down or restarting). Its
        persistent handles are dropped (their contexts stay). Idempotent; after it, the
        harness is closed.
        """
        if self._close_task is None:
            self._closed = True
            self._close_task = asyncio.create_task(self._detach_all())
            self._close_task.add_done_callback(_observe)
        await asyncio.shield(self._close_task)

    async def _detach_all(self) -> None:
        runtime = self._runtime
        if runtime is None:
            return
        runtime.closed = True
        runtime.sessions.clear()
        await runtime.aclose()

    async def _close_all(self) -> None:
        runtime = self._runtime
        if runtime is None:
            return
        runtime.closed = True
        try:
            sessions = tuple(runtime.sessions)
            failures: dict[SessionId, BaseException] = {}
            if sessions:
                releases = {asyncio.ensure_future(s.release()): s for s in sessions}
                done, pending = await asyncio.wait(
                    releases, timeout=self._budget.total.total_seconds()
                )
                for release in pending:
                    release.cancel()
                    session = releases[release]
                    await session.force_unresolved_cleanup()
                    failures[session.id] = TimeoutError("cleanup budget exhausted")
                for release in done:
                    error = release.exception()
                    if isinstance(error, CheckpointCleanupError):
                        failures.update(error.failures)
                    elif error is not None:
                        failures[releases[release].id] = error
            if failures:
                raise CheckpointCleanupError(failures)
        finally:
            await runtime.aclose()


__all__ = ["CeleryHarness"]
