"""Errors of the wire contract.

WireError
├── DecodeError (ValueError)        a stored record or event is not in the expected encoding
├── ProfileError (ValueError)       a profile registry or profile name cannot be resolved
├── QueueNameError (ValueError)     a queue name (AHP_QUEUE, a worker's, a profile's) is invalid
├── OutputSchemaError (ValueError)  a required output schema is not a usable JSON Schema
└── RedisModulesMissingError (RuntimeError) the Redis lacks the Query Engine or JSON that
                                    checkpoints need (callers and workers both refuse it)
"""


class WireError(Exception):
    """Root of every error raised by the wire contract."""


class DecodeError(WireError, ValueError):
    """A stored record, stream entry or message does not match the wire encoding."""


class ProfileError(WireError, ValueError):
    """A profile registry could not be loaded, or a profile name is unknown."""


class QueueNameError(WireError, ValueError):
    """A broker queue name (``AHP_QUEUE``, ``AHP_WORKER_QUEUES``, ``--queues``,
    ``AgentProfile.queue``) is not a valid name (``wire.queues.QUEUE_RULE``)."""


class OutputSchemaError(WireError, ValueError):
    """A task's required output schema is not a usable Draft 2020-12 JSON Schema."""

    def __init__(self, problems: tuple[str, ...]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class RedisModulesMissingError(WireError, RuntimeError):
    """The Redis lacks the Query Engine or JSON that checkpoints need (a plain Redis 7, a
    managed Redis without modules): nothing can run there. The message is
    :func:`wire.modules.missing_modules`'s."""
