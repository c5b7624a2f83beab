"""The caller-side handle of one session (one LangGraph checkpoint thread)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from uuid import uuid4

from agent_harness_protocol import (
    AgentSession,
    CompatibilityReport,
    ContextRetentionDisposition,
    HarnessTransportError,
    PersistentSessionRef,
    SessionBlockedError,
    SessionDisposition,
    SessionId,
    SessionSpec,
    StorageNamespace,
    TaskId,
    TaskRequest,
    TaskStartUnconfirmedError,
    TextInput,
    UnconfirmedStart,
    UnresolvedReason,
)
from redis.exceptions import RedisError

from wire.codec import dumps, task_input_to_json
from wire.narrowing import narrowing_of
from wire.provider import PROVIDER
from wire.queues import queue_of
from wire.store import BusyPolicy, ReleaseResult, StartResult
from wire.tenants import TenantLimits, retry_after
from wire.tracing_context import active

from . import spans
from .admission import validate_task
from .errors import (
    CheckpointCleanupError,
    IdempotencyKeyReusedError,
    SessionBusyError,
    TenantQueueFullError,
    TenantRateLimitedError,
)
from .idempotency import fingerprinted_key
from .redis_errors import Fate, fate, reported, transport_error
from .runtime import CallerRuntime
from .task import CeleryTask
from .transport import PublishError, PublishFate

log = logging.getLogger(__name__)


def _observe(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()


class CelerySession(AgentSession):
    """One handle on a session. A persistent session may have many handles (aliases), in
    any process: they share its exclusion and blocking through Redis. Releasing a handle
    of a persistent session keeps the context; releasing a non-persistent one deletes it.

    A single-task session (``create_session(single_task=True)``) takes one task and ends
    with it: the step that settles the task, wherever it runs, releases the session.
    """

    def __init__(
        self,
        runtime: CallerRuntime,
        session_id: SessionId,
        spec: SessionSpec,
        *,
        handle_id: str | None = None,
        single_task: bool = False,
        tenant: str = "",
    ) -> None:
        self.runtime = runtime
        self.tenant = tenant
        """The session's owner ('' for none): whose limits its starts meet."""
        self._id = session_id
        self._spec = spec
        self._handle_id = handle_id
        self._single_task = single_task
        self._closed = False
        self._current: CeleryTask | None = None
        self._release_task: asyncio.Task[None] | None = None
        self._unconfirmed = ""
        """The task id of this handle's unconfirmed start (the session stays blocked)."""
        self._blocked = False
        """Whether the unconfirmed start's block is recorded in Redis."""
        self._undo = ""
        """A start that never reached the broker and is still to be rolled back."""

    @property
    def id(self) -> SessionId:
        return self._id

    @property
    def spec(self) -> SessionSpec:
        return self._spec

    @property
    def persistent(self) -> bool:
        return self._handle_id is not None

    @property
    def single_task(self) -> bool:
        """The session takes one task and is released when that task settles."""
        return self._single_task

    @property
    def handle_id(self) -> str | None:
        """This handle's registration in the session's open-handle set (persistent only)."""
        return self._handle_id

    @property
    def disposition(self) -> SessionDisposition:
        profile = self.runtime.profile
        retention = (
            ContextRetentionDisposition.MATERIALIZED if self.persistent else profile.retention
        )
        return SessionDisposition(retention, profile.history_visibility)

    @property
    def persistent_ref(self) -> PersistentSessionRef | None:
        if not self.persistent:
            return None
        namespace = StorageNamespace(self.runtime.settings.namespace)
        return PersistentSessionRef(PROVIDER, namespace, self._id.value)

    def validate(self, request: TaskRequest) -> CompatibilityReport:
        return validate_task(request, self.runtime.profile, narrowing_of(self._spec))

    async def start_task(
        self,
        request: TaskRequest,
        *,
        idempotency_key: str | None = None,
        if_busy: BusyPolicy = BusyPolicy.REJECT,
        limits: TenantLimits | None = None,
    ) -> CeleryTask:
        """Admit, claim the session atomically, and publish one run.

        Beyond the AHP port: ``idempotency_key`` makes a retried request return the task
        its first attempt started (``task.replayed``), for ``AHP_IDEMPOTENCY_RETENTION``;
        the same key with a different request raises ``IdempotencyKeyReusedError``.
        ``if_busy=BusyPolicy.ENQUEUE`` queues the task behind the session's unsettled one
        (``task.queued``): queued tasks run strictly in order, each once the one before
        settled; releasing a non-persistent session settles them ``Cancelled``.
        ``limits``: the session's tenant's (docs/tenants.md), applied in the start's
        atomic step: past ``running`` the task is parked (``task.queued``) until one of
        the tenant's tasks settles; None applies none and leaves the tenant's as they are.

        Raises:
            SessionBlockedError: released session, an unconfirmed earlier start, or a
                graph run that outlived its settled task.
            SessionBusyError: another task of this session has not settled.
            IncompatibleRequirementError: the request cannot be served.
            IdempotencyKeyReusedError: the key started a task with another request.
            TenantRateLimitedError: past the tenant's starts per second; nothing written.
            TenantQueueFullError: the tenant's queued limit is reached; nothing written.
            ValueError: the idempotency key is empty, longer than 255 characters or not
                printable ASCII.
            HarnessTransportError: the run surely did not reach the broker and never
                runs (Redis down or refusing writes, the broker refusing the message);
                the session stays usable.
            TaskStartUnconfirmedError: the run may or may not have reached the broker;
                the session stays blocked, as a retry could run the work twice. It runs
                at most once, only if its message reached the broker, and never after
                the session was released (then it ends ``Cancelled``). Its fate is in
                its task record, ``Keys.task(reference.request_id)``.
        """
        if not active():
            return await self._start_task(request, idempotency_key, if_busy, limits)
        with spans.starting(self._id.value) as span:
            task = await self._start_task(request, idempotency_key, if_busy, limits)
            spans.started(span, task.id.value)
            return task

    async def _start_task(
        self,
        request: TaskRequest,
        idempotency_key: str | None,
        if_busy: BusyPolicy,
        limits: TenantLimits | None,
    ) -> CeleryTask:
        if self._closed or self.runtime.closed:
            raise SessionBlockedError(self._id, "session has been released")
        self.validate(request).require_compatible()
        assert isinstance(request.input, TextInput)
        task_input = task_input_to_json(request)
        idempotency = fingerprinted_key(idempotency_key, task_input, if_busy)
        store = self.runtime.store
        if self._unconfirmed:
            await self._block(self._unconfirmed)
            raise SessionBlockedError(
                self._id, f"the start of task {self._unconfirmed} is unconfirmed; it may still run"
            )
        if self._undo:
            # An earlier start failed and could not be undone then: undo it now.
            with reported("undoing a start that never reached the broker"):
                await store.rollback_start(self._id.value, self._undo)
            self._undo = ""
        task_id = TaskId(uuid4().hex)
        try:
            result, detail = await store.start_task(
                self._id.value,
                task_id.value,
                dumps(task_input),
                if_busy=if_busy,
                idempotency=idempotency,
                idempotency_retention=self.runtime.settings.idempotency_retention,
                queue=queue_of(self.runtime.profile, self.runtime.settings),
                limits=limits,
            )
        except RedisError as error:
            if fate(error) is not Fate.REFUSED:
                # The record may exist; it was never published, so it never runs, but it
                # holds the session until undone.
                self._undo = task_id.value
            raise transport_error(error, "the task was not started") from error
        if result is StartResult.REPLAY:
            replayed = CeleryTask(self.runtime, self._id, TaskId(detail), replayed=True)
            replayed.start_reading()
            return replayed
        if result is StartResult.ADOPTED:
            return await self._publish_adopted(TaskId(detail))
        if result is StartResult.REUSED:
            assert idempotency_key is not None
            raise IdempotencyKeyReusedError(idempotency_key, detail)
        if result is StartResult.RATE_LIMITED:
            raise TenantRateLimitedError(self.tenant, retry_after(int(detail)))
        if result is StartResult.QUEUE_FULL:
            raise TenantQueueFullError(self.tenant, int(detail))
        trace_context = (
            await spans.keep_trace(store, task_id.value)
            if result in {StartResult.OK, StartResult.QUEUED, StartResult.PARKED} and active()
            else None
        )
        if result in {StartResult.QUEUED, StartResult.PARKED}:
            # Its run is published by whoever settles the task ahead of it (of its
            # session, or of its tenant: a worker's dispatcher then).
            queued = CeleryTask(
                self.runtime, self._id, task_id, queued=True, created_at=_redis_time(detail)
            )
            queued.traced(trace_context)
            queued.start_reading()
            if result is StartResult.PARKED:
                # The session's own task, waiting for its tenant: this session's current.
                self._current = queued
                if self._single_task:
                    queued.when_settled(self._ended)
            return queued
        if result is StartResult.BUSY:
            raise SessionBusyError(self._id.value, detail)
        if result is StartResult.OUTLIVED:
            raise SessionBlockedError(
                self._id, "a previous graph run has not ended although its task was settled"
            )
        if result is StartResult.SPENT:
            raise SessionBlockedError(
                self._id, f"a single-task session takes one task; it started task {detail}"
            )
        if result is StartResult.UNCONFIRMED:
            raise SessionBlockedError(
                self._id, f"the start of task {detail} is unconfirmed; it may still run"
            )
        if result is not StartResult.OK:
            raise SessionBlockedError(self._id, f"session cannot start tasks: {result.value}")
        task = CeleryTask(self.runtime, self._id, task_id, created_at=_redis_time(detail))
        task.traced(trace_context)
        try:
            await self.runtime.publisher.publish(
                task_id.value, self._id.value, queue_of(self.runtime.profile, self.runtime.settings)
            )
        except PublishError as error:
            if error.fate is PublishFate.NOT_DELIVERED:
                try:
                    await store.rollback_start(self._id.value, task_id.value)
                except RedisError as undo_error:
                    # Never published and never confirmed: no sweeper republishes it.
                    # The next start of this handle undoes it first.
                    self._undo = task_id.value
                    log.warning("could not undo start %s yet: %s", task_id.value, undo_error)
                raise HarnessTransportError(f"task not delivered to the broker: {error}") from error
            reference = UnconfirmedStart(self._id, task_id.value)
            self._unconfirmed = task_id.value
            await self._block(task_id.value)
            raise TaskStartUnconfirmedError(
                reference, f"delivery of task {task_id.value} is unknown: {error}"
            ) from error
        self._current = task
        task.start_reading(confirm=True)
        if self._single_task:
            # Its settle released the session: this handle has nothing left to release.
            task.when_settled(self._ended)
        return task

    async def _publish_adopted(self, task_id: TaskId) -> CeleryTask:
        """Publish the start an earlier attempt with the same key recorded and never
        published (see ``StartResult.ADOPTED``). Not delivered: the adoption is undone
        and the retry fails (safe to repeat). Delivery unknown: the task is followed as
        replayed; the sweeper finds its message, or settles it once the unpublished-start
        bound passes."""
        store = self.runtime.store
        try:
            queue = await store.task_queue(task_id.value)
            await self.runtime.publisher.publish(task_id.value, self._id.value, queue)
        except (PublishError, RedisError) as error:
            surely_not_sent = isinstance(error, RedisError) or (
                isinstance(error, PublishError) and error.fate is PublishFate.NOT_DELIVERED
            )
            if not surely_not_sent:
                log.warning("the adopted start %s may not have been delivered", task_id.value)
                replayed = CeleryTask(self.runtime, self._id, task_id, replayed=True)
                replayed.start_reading()
                return replayed
            with contextlib.suppress(RedisError):
                await store.unadopt(task_id.value)
            raise HarnessTransportError(f"task not delivered to the broker: {error}") from error
        adopted = CeleryTask(self.runtime, self._id, task_id, replayed=True)
        adopted.start_reading(confirm=True)
        return adopted

    def _ended(self) -> None:
        self._closed = True
        self.runtime.sessions.discard(self)

    def adopt(self, task: CeleryTask) -> None:
        """Make ``task`` (attached by id) this handle's current task: releasing the
        handle stops it within the cleanup budget, as if this handle had started it."""
        self._current = task

    async def _block(self, task_id: str) -> None:
        """Record durably that this session has an unconfirmed start, so every handle
        refuses to start more; this handle refuses anyway, and retries a failed write."""
        if self._blocked:
            return
        try:
            await self.runtime.store.block_unconfirmed(self._id.value, task_id)
        except RedisError as error:
            log.warning("could not record the unconfirmed start %s yet: %s", task_id, error)
            return
        self._blocked = True

    async def release(self) -> None:
        """Settle active work within the cleanup budget, then delete what the session
        stored: its record, lease, fence and handle keys at once, its checkpoint thread
        through the workers' durable maintenance queue. Its tasks' records and event
        streams expire after the retention period (``AHP_TASK_RETENTION``).

        Idempotent; cancelling the caller does not interrupt it. A release that failed
        because Redis could not be reached may be called again.

        Raises:
            CheckpointCleanupError: the checkpoint thread could not be deleted in time.
            HarnessTransportError: Redis could not be reached; call again.
        """
        current = self._current
        if self._single_task and current is not None and current.settled:
            return  # the step that settled its task released it
        if self._release_task is None:
            self._closed = True
            self._release_task = asyncio.create_task(self._release())
            self._release_task.add_done_callback(_observe)
        release = self._release_task
        try:
            await asyncio.shield(release)
        except HarnessTransportError:
            if self._release_task is release:
                self._release_task = None
            raise

    async def _release(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        budget = self.runtime.settings
        store = self.runtime.store
        try:
            # A non-persistent session is closed, and forgotten in the same step when
            # none of its tasks is unsettled (its record, lease, fence and handle keys go);
            # this handle's unconfirmed start, if no worker claimed it, can never run now.
            forgotten, ran = False, True
            if not self.persistent:
                with reported("the session was not released"):
                    result, ran = await store.release_session(
                        self._id.value, unconfirmed_task=self._unconfirmed
                    )
                forgotten = result is not ReleaseResult.CLOSED
            task = self._current
            if task is not None:
                await task.stop(
                    budget.cleanup_per_task.total_seconds(),
                    UnresolvedReason.CLEANUP_BOUND_EXCEEDED,
                    "cleanup ended before the worker confirmed that the graph run stopped",
                )
            if self._handle_id is not None:
                # The context stays for reopen_session; only this handle closes.
                with reported("the session handle was not closed"):
                    await self.runtime.drop_handle(self._id.value, self._handle_id)
            else:
                if not forgotten:
                    # Whatever still runs loses its lease here; a later claim never runs.
                    with reported("the session was not released"):
                        _, ran = await store.release_session(self._id.value, force=True)
                if not ran:
                    # No run was ever claimed: no checkpoint was written, nothing to delete
                    # (and no worker need be serving to confirm it).
                    self.runtime.sessions.discard(self)
                    return
                remaining = budget.cleanup_total.total_seconds() - (loop.time() - started)
                try:
                    await self.runtime.delete_thread(
                        self.runtime.keys.thread_id(self._id.value), max(0.0, remaining)
                    )
                except Exception as error:
                    raise CheckpointCleanupError({self._id: error}) from error
        except HarnessTransportError:
            raise  # still tracked: a later release (or the harness's aclose) tries again
        except BaseException:
            self.runtime.sessions.discard(self)
            raise
        self.runtime.sessions.discard(self)

    async def force_unresolved_cleanup(self) -> None:
        """The total budget ran out: settle what is still active as ``Unresolved``."""
        self._closed = True
        task = self._current
        if task is not None:
            await task.force_unresolved(
                UnresolvedReason.CLEANUP_BOUND_EXCEEDED,
                "cleanup ended before native termination could be confirmed",
            )


def _redis_time(milliseconds: str) -> datetime | None:
    return datetime.fromtimestamp(int(milliseconds) / 1000, tz=UTC) if milliseconds else None
