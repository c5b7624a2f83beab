"""Errors of the operator tooling (embedded Redis, worker processes, CLI).

One root, apart from the AHP port's own tree in ``harness.errors``::

    ToolingError (RuntimeError)
    ├── EmbeddedRedisError          the embedded Redis server could not be managed
    │   ├── EmbeddedRedisAlreadyStartedError
    │   ├── RedisPortInUseError     (``port``)
    │   └── RedisBinaryNotFoundError
    └── WorkerProcessError          a worker OS process did not come up or stop cleanly
                                    (``hostname``)

Errors about one port or one worker carry it as an attribute (and in the message).
"""

from __future__ import annotations


class ToolingError(RuntimeError):
    """Root of every error the tooling defines."""


class EmbeddedRedisError(ToolingError):
    """The embedded Redis server could not be started, reached or stopped."""


class EmbeddedRedisAlreadyStartedError(EmbeddedRedisError):
    """``start()`` was called on a server that is already running."""


class RedisPortInUseError(EmbeddedRedisError):
    """The requested port is already bound by another process.

    Attributes:
        port: The port (None: not chosen yet).
    """

    def __init__(self, port: int | None, message: str) -> None:
        self.port = port
        super().__init__(message)


class RedisBinaryNotFoundError(EmbeddedRedisError):
    """The Redis 8 binary or its modules are not installed (extra ``embedded-redis``)."""


class WorkerProcessError(ToolingError):
    """A worker OS process exited, or did not answer, when it should have.

    Attributes:
        hostname: The worker's Celery hostname.
    """

    def __init__(self, hostname: str, message: str) -> None:
        self.hostname = hostname
        super().__init__(message)
