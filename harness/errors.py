"""Errors raised by the caller side of the distributed AHP harness.

The protocol's own errors (``IncompatibleRequirementError``, ``SessionBlockedError``,
``HarnessTransportError``, ``TaskStartUnconfirmedError`` ...) come from
``agent_harness_protocol`` and are raised unchanged. Everything this package adds
descends from one root, and each error carries the ids it is about as attributes (and in
its message)::

    CeleryHarnessError (RuntimeError)
    ├── CheckpointCleanupError      stored context of released sessions may remain
    │                               (``failures`` by session id)
    ├── RemoteTaskError             the worker-side exception behind a Failed outcome
    ├── SessionBusyError            another task of the session has not settled yet
    │                               (``session_id``, the busy ``task_id``)
    ├── UnknownSessionError         no open session of this id (for this tenant)
    │                               (``session_id``)
    ├── UnknownTaskError            no retained task of this id (for this tenant)
    │                               (``task_id``)
    ├── TenantLimitError            a limit of the session's tenant refused the start
    │   │                           (``tenant``, ``retry_after``); nothing was written
    │   ├── TenantRateLimitedError  past its starts per second
    │   └── TenantQueueFullError    its queued limit of parked tasks (``parked``)
    ├── IdempotencyKeyReusedError   an idempotency key came back with another request
    │                               (``key``, the ``task_id`` it started)
    ├── UnknownPersistentSessionError   (also IncompatibleRequirementError) a reference
    │                               names no persistent context of this namespace
    │                               (``session_id``)
    ├── PersistentConfigurationError    (also IncompatibleRequirementError) reopening
    │                               would change the context's profile or configuration
    │                               (``session_id``)
    ├── StoredHistoryUnavailableError   (also HarnessTransportError) the context's
    │                               checkpoint history is missing from storage
    │                               (``session_id``)
    ├── RedisModulesMissingError    (also HarnessTransportError) the deployment's Redis
    │                               lacks the Query Engine or JSON checkpoints need
    ├── UnknownInteractionError     (also LookupError, ValueError) the task raised no
    │                               interaction of this id (``task_id``,
    │                               ``interaction_id``)
    └── InteractionClosedError      the interaction was answered, cleared, or a response
                                    to it was already submitted (``task_id``,
                                    ``interaction_id``)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from agent_harness_protocol import (
    CompatibilityIssue,
    HarnessTransportError,
    IncompatibleRequirementError,
    SessionId,
)

import wire.errors as wire_errors


class CeleryHarnessError(RuntimeError):
    """Root of every error this package defines."""


class CheckpointCleanupError(CeleryHarnessError):
    """Deleting a released session's checkpoint thread failed or exceeded its budget.

    Task outcomes and closed handles are unaffected; only the stored context may remain.
    """

    def __init__(self, failures: Mapping[SessionId, BaseException]) -> None:
        self.failures: Mapping[SessionId, BaseException] = dict(failures)
        detail = "; ".join(
            f"{session_id.value}: {type(error).__name__}: {error}"
            for session_id, error in self.failures.items()
        )
        super().__init__(f"checkpoint cleanup failed for released sessions: {detail}")


class RemoteTaskError(CeleryHarnessError):
    """An exception raised on a worker, carried back across the process boundary.

    Only its type name, module and message cross the wire: no pickle.
    """

    def __init__(self, type_name: str, module: str, message: str) -> None:
        self.type_name = type_name
        self.module = module
        self.remote_message = message
        super().__init__(
            f"{module}.{type_name}: {message}" if module else f"{type_name}: {message}"
        )


class SessionBusyError(CeleryHarnessError):
    """A session runs one task at a time; the previous task has not settled.

    Attributes:
        session_id: The busy session.
        task_id: Its task that has not settled (await it, or cancel it, then start again).
    """

    def __init__(self, session_id: str, task_id: str) -> None:
        self.session_id = session_id
        self.task_id = task_id
        super().__init__(f"session {session_id} is running task {task_id}")


class UnknownSessionError(CeleryHarnessError):
    """No open session has this id for the asking tenant: never created, released, or
    another tenant's (the three are told apart by nobody but the owner).

    Attributes:
        session_id: The id asked for.
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"no session {session_id!r}")


class UnknownTaskError(CeleryHarnessError):
    """No task has this id for the asking tenant: never started, its retention
    (``AHP_TASK_RETENTION``) ended, or another tenant's.

    Attributes:
        task_id: The id asked for.
    """

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"no task {task_id!r}")


class TenantLimitError(CeleryHarnessError):
    """A limit of the session's tenant refused the start; nothing was written
    (docs/tenants.md).

    Attributes:
        tenant: The tenant whose limit it is.
        retry_after: When a start may succeed again (None: when one of the tenant's
            queued tasks has started, which no one can tell in advance).
    """

    def __init__(self, tenant: str, message: str, retry_after: timedelta | None) -> None:
        self.tenant = tenant
        self.retry_after = retry_after
        super().__init__(message)


class TenantRateLimitedError(TenantLimitError):
    """The tenant started tasks faster than its ``starts_per_second``."""

    def __init__(self, tenant: str, retry_after: timedelta) -> None:
        super().__init__(
            tenant,
            f"tenant {tenant!r} is past its starts per second; retry in "
            f"{retry_after.total_seconds():.3f} s",
            retry_after,
        )


class TenantQueueFullError(TenantLimitError):
    """The tenant has its ``queued`` limit of tasks waiting for its running limit.

    Attributes:
        parked: How many of its tasks wait.
    """

    def __init__(self, tenant: str, parked: int) -> None:
        self.parked = parked
        super().__init__(
            tenant,
            f"tenant {tenant!r} has {parked} tasks waiting for its running limit, its queued limit",
            None,
        )


class IdempotencyKeyReusedError(CeleryHarnessError):
    """An idempotency key that started a task came back with a different request;
    nothing was started.

    Attributes:
        key: The client's idempotency key.
        task_id: The task the key started with its first request.
    """

    def __init__(self, key: str, task_id: str) -> None:
        self.key = key
        self.task_id = task_id
        super().__init__(f"idempotency key {key!r} started task {task_id} with a different request")


class UnknownPersistentSessionError(CeleryHarnessError, IncompatibleRequirementError):
    """The reference names no persistent context of this namespace (never created,
    not persistent, or deleted); nothing was created in its place."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        IncompatibleRequirementError.__init__(
            self,
            [CompatibilityIssue("reference.id", f"no persistent context {session_id!r} exists")],
        )


class PersistentConfigurationError(CeleryHarnessError, IncompatibleRequirementError):
    """Reopening would change what the open handles of the context rely on."""

    def __init__(self, session_id: str, path: str, message: str) -> None:
        self.session_id = session_id
        IncompatibleRequirementError.__init__(
            self, [CompatibilityIssue(path, f"persistent context {session_id}: {message}")]
        )


class StoredHistoryUnavailableError(CeleryHarnessError, HarnessTransportError):
    """The context has completed turns but its checkpoint history is not in storage
    (restore the checkpoint keys, then reopen again)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"the checkpoint history of session {session_id} is not in storage")


class RedisModulesMissingError(
    CeleryHarnessError, HarnessTransportError, wire_errors.RedisModulesMissingError
):
    """``wire.errors.RedisModulesMissingError`` as the caller's AHP transport error: the
    deployment's Redis lacks the Query Engine or JSON that checkpoints need."""


class UnknownInteractionError(CeleryHarnessError, LookupError, ValueError):
    """The task raised no interaction of this id (or its retention ended): bad input, so
    also a ``ValueError`` (and a ``LookupError``, as an unknown key).

    Attributes:
        task_id: The task asked.
        interaction_id: The id given.
    """

    def __init__(self, task_id: str, interaction_id: str) -> None:
        self.task_id = task_id
        self.interaction_id = interaction_id
        super().__init__(f"task {task_id} has no pending interaction {interaction_id!r}")


class InteractionClosedError(CeleryHarnessError):
    """The interaction is no longer pending for this handle: a response to it was already
    submitted (also by a caller that was cancelled meanwhile), or it was resolved
    (answered, or cleared by cancellation, the task's end or an unconfirmed response).
    Nothing was sent.

    Attributes:
        task_id: The task.
        interaction_id: The interaction.
    """

    def __init__(self, task_id: str, interaction_id: str, why: str) -> None:
        self.task_id = task_id
        self.interaction_id = interaction_id
        super().__init__(f"interaction {interaction_id} of task {task_id}: {why}")
