"""What a Redis error on a caller's public path means, decided in one place.

Every Redis call the caller makes for a public operation (create or reopen a session,
start a task and undo or block it, cancel, release) either surely did not happen or may
have happened:

* **refused**: the command never reached a Redis that would run it: the connection
  could not be made (refused, unreachable, unresolvable), a pooled connection was found
  broken before the command was sent, the bounded pool had no free connection in time
  (``harness.connections``), or Redis refused the command itself (``OOM`` at
  ``maxmemory`` with ``noeviction``, ``READONLY`` replica, ``LOADING``). A refused Lua
  script wrote nothing: Redis refuses it at its first write.
* **unknown**: the command was sent and the reply was lost (reset, timeout, closed by
  the server): it may have run.

The classification relies on each command being sent once: the caller's connection pool
(``harness.connections.caller_pool``) has no redis-py retry, so a refusal is the refusal of the only
attempt, never of a retry after an attempt that may have run.

Either way the caller gets :class:`HarnessTransportError` (or, for a start whose run
message may have gone out, ``TaskStartUnconfirmedError``), never a raw redis-py error.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum

from agent_harness_protocol import HarnessTransportError
from redis.exceptions import BusyLoadingError, OutOfMemoryError, ReadOnlyError, RedisError


class Fate(StrEnum):
    REFUSED = "refused"
    """The command surely did not run."""
    UNKNOWN = "unknown"
    """The command may have run."""


_REFUSED_ERRNOS = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL}
_REFUSED_TEXT = (
    "Error connecting",
    "connecting to",
    "Connection refused",
    "Connection has data",
    "No connection available",  # a bounded pool had no free connection: nothing was sent
)


def fate(error: BaseException) -> Fate:
    """Whether the command that raised ``error`` (or one it was chained from) surely did
    not run."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OutOfMemoryError | ReadOnlyError | BusyLoadingError):
            return Fate.REFUSED
        if isinstance(current, ConnectionRefusedError | socket.gaierror):
            return Fate.REFUSED
        if isinstance(current, OSError) and current.errno in _REFUSED_ERRNOS:
            return Fate.REFUSED
        if any(text in str(current) for text in _REFUSED_TEXT):
            return Fate.REFUSED
        current = current.__cause__ or current.__context__
    return Fate.UNKNOWN


def transport_error(error: BaseException, doing: str) -> HarnessTransportError:
    """The AHP error for a Redis failure while ``doing`` something (a short phrase)."""
    if fate(error) is Fate.REFUSED:
        detail = "Redis did not carry it out"
    else:
        detail = "whether Redis carried it out is unknown"
    return HarnessTransportError(f"{doing}: {detail} ({type(error).__name__}: {error})")


@contextmanager
def reported(doing: str) -> Iterator[None]:
    """Re-raise any Redis error inside the block as :class:`HarnessTransportError`."""
    try:
        yield
    except RedisError as error:
        raise transport_error(error, doing) from error


__all__ = ["Fate", "fate", "reported", "transport_error"]
