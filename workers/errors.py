"""Errors raised on the worker side.

WorkerError (RuntimeError)
├── StaleLeaseError        this run no longer holds its session lease; it must not write
├── ModelCallCancelledError the cancellation delivered to a model call ended it
├── RunCancelledError      a recorded cancellation stopped the run at a step boundary
├── RuntimeStoppedError    the process's loop stopped while a run was in progress
├── FencingUnavailableError checkpoints and leases are configured in different Redis servers
├── ProfileMismatchError   the caller's profile declaration differs from this worker's
├── ModelBuildError        the profile's chat model could not be built
└── RedisModulesMissingError the checkpoint Redis lacks the Query Engine or JSON
"""


class WorkerError(RuntimeError):
    """Root of every error the worker side defines."""


class StaleLeaseError(WorkerError):
    """The run's lease was taken over or expired: its writes are refused."""


class ModelCallCancelledError(WorkerError):
    """The model call ended by the cancellation the worker delivered to it."""


class RunCancelledError(WorkerError):
    """A cancellation recorded before a step (the model call) stopped the run there."""


class RuntimeStoppedError(WorkerError):
    """The worker loop stopped during a run; the message must be handed back."""


class FencingUnavailableError(WorkerError):
    """Checkpoint writes cannot be fenced: the checkpoints are configured in another Redis
    than the session leases."""


class ProfileMismatchError(WorkerError):
    """The session was created under a profile declaration this worker does not have."""


class ModelBuildError(WorkerError):
    """The chat model named by a profile could not be imported or constructed."""


class RedisModulesMissingError(WorkerError):
    """The checkpoint Redis lacks the Query Engine or JSON: the worker cannot serve."""
