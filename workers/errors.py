"""Errors raised on the worker side.

    WorkerError (RuntimeError)
    ├── StaleLeaseError        this run no longer holds its session lease; it must not write
    ├── ProfileMismatchError   the caller's profile declaration differs from this worker's
    └── ModelBuildError        the profile's chat model could not be built
"""


class WorkerError(RuntimeError):
    """Root of every error the worker side defines."""


class StaleLeaseError(WorkerError):
    """The run's lease was taken over or expired: its writes are refused."""


class ProfileMismatchError(WorkerError):
    """The session was created under a profile declaration this worker does not have."""


class ModelBuildError(WorkerError):
    """The chat model named by a profile could not be imported or constructed."""
