"""Errors raised on the worker side; each carries the ids it is about as attributes (and in
its message).

WorkerError (RuntimeError)
├── StaleLeaseError        this run no longer holds its session lease; it must not write
│                          (``thread_id``; ``task_id`` when known)
├── ModelCallCancelledError the cancellation delivered to a model call ended it (``task_id``)
├── RunCancelledError      a recorded cancellation stopped the run at a step boundary
│                          (``task_id``)
├── RuntimeStoppedError    the process's loop stopped while a run was in progress
├── FencingUnavailableError checkpoints and leases are configured in different Redis servers
├── ProfileMismatchError   the caller's profile declaration differs from this worker's
│                          (``profile``: its name)
├── ModelBuildError        the profile's chat model could not be built
├── InteractionError       a resume value does not answer the interaction its node asked
└── ToolBuildError         a tool the profile declares could not be built

A checkpoint Redis without the Query Engine or JSON raises
``wire.errors.RedisModulesMissingError``, the one the callers raise too.
"""

from __future__ import annotations


class WorkerError(RuntimeError):
    """Root of every error the worker side defines."""


class StaleLeaseError(WorkerError):
    """The run's lease was taken over or expired: its writes are refused.

    Attributes:
        thread_id: The checkpoint thread (session) whose lease the run lost, if known
            (the message names it).
        task_id: The task of the run, if known (the message starts with it).
    """

    def __init__(
        self, message: str, *, thread_id: str | None = None, task_id: str | None = None
    ) -> None:
        self.thread_id = thread_id
        self.task_id = task_id
        super().__init__(f"task {task_id}: {message}" if task_id else message)


class ModelCallCancelledError(WorkerError):
    """The model call ended by the cancellation the worker delivered to it.

    Attributes:
        task_id: The task whose model call ended.
    """

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"model call of task {task_id} was cancelled")


class RunCancelledError(WorkerError):
    """A cancellation recorded before a step (the model call) stopped the run there.

    Attributes:
        task_id: The cancelled task.
    """

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {task_id}: cancelled before the model call")


class RuntimeStoppedError(WorkerError):
    """The worker loop stopped during a run; the message must be handed back."""


class FencingUnavailableError(WorkerError):
    """Checkpoint writes cannot be fenced: the checkpoints are configured in another Redis
    than the session leases."""


class ProfileMismatchError(WorkerError):
    """The session was created under a profile declaration this worker does not have.

    Attributes:
        profile: The name of the profile the session was created under.
    """

    def __init__(self, profile: str, message: str) -> None:
        self.profile = profile
        super().__init__(message)


class ModelBuildError(WorkerError):
    """The chat model named by a profile could not be imported or constructed."""


class ToolIdempotencyKeyMissingError(WorkerError):
    """A tool asked for its call's idempotency key outside a worker's agent run."""


class ToolBuildError(WorkerError):
    """A tool named by a profile could not be imported or wrapped."""


class InteractionError(WorkerError):
    """A resume value does not answer the interaction the node asked (a bug or a tampered
    record): the run fails instead of guessing."""
