"""One way to pause between attempts, for every retry loop on either side.

:class:`Retries` is the sequence of pauses of one retry loop: exponential with equal
jitter (redis-py's ``EqualJitterBackoff``: each pause is between half and all of its
exponential step, so processes that failed together do not retry together), from a first
pause up to a cap, starting again from the first after a quiet spell.

An :class:`Outage` tracks one consumer's run of Redis failures: it pauses by
:class:`Retries` between attempts, logs once when an outage begins (a warning for
connection errors, the traceback for anything else) and once when it ends, and, when
given a window, says when the outage has lasted too long to keep trying.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta

from redis.backoff import EqualJitterBackoff, ExponentialBackoff
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    BusyLoadingError,
)
"""Errors that say Redis could not be reached (or is still loading after a restart): the
command may be tried again once it is back."""


def connection_lost(error: BaseException | None) -> bool:
    """Whether ``error``, or an error it was raised from, is a lost Redis connection."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, CONNECTION_ERRORS):
            return True
        seen.add(id(error))
        error = error.__cause__
    return False


class Retries:
    """The pauses of one retry loop.

    Args:
        first: The longest first pause; each further failure doubles the step.
        cap: The longest pause.
        reset_after: A failure this long after the previous one starts the sequence again
            from ``first`` (``None``: only :meth:`reset` does).
        jitter: Whether each pause is drawn between half and all of its step (``False``:
            exactly the step, for a loop alone on its process).
    """

    def __init__(
        self,
        *,
        first: timedelta,
        cap: timedelta,
        reset_after: timedelta | None = None,
        jitter: bool = True,
    ) -> None:
        shape = EqualJitterBackoff if jitter else ExponentialBackoff
        self._backoff = shape(cap=cap.total_seconds(), base=first.total_seconds())
        self._reset_after = None if reset_after is None else reset_after.total_seconds()
        self._failures = 0
        self._last = float("-inf")

    def next_pause(self) -> float:
        """Note a failure; the seconds to pause before the next attempt."""
        now = time.monotonic()
        if self._reset_after is not None and now - self._last > self._reset_after:
            self._failures = 0
        self._last = now
        pause = self._backoff.compute(self._failures)
        self._failures += 1
        return pause

    def reset(self) -> None:
        """Note a success: the next failure pauses ``first`` again."""
        self._failures = 0


class Outage:
    """Backoff and logging of one consumer's Redis outages.

    Args:
        what: Names the consumer in the log lines.
        first: The first pause; each further failure doubles it.
        cap: The longest pause.
        window: How long an outage may last before :meth:`exhausted` says to give up
            (``None``: never).
        logger: Where the outage is reported.
    """

    def __init__(
        self,
        what: str,
        *,
        first: timedelta = timedelta(milliseconds=50),
        cap: timedelta = timedelta(seconds=1),
        window: timedelta | None = None,
        logger: logging.Logger = log,
    ) -> None:
        self._what = what
        # One consumer per process and outage: its pauses are exact, not jittered.
        self._retries = Retries(first=first, cap=cap, jitter=False)
        self._window = None if window is None else window.total_seconds()
        self._log = logger
        self._since: float | None = None

    @property
    def failing(self) -> bool:
        """Whether an outage is under way (a failure since the last success)."""
        return self._since is not None

    def seconds(self) -> float:
        """How long the current outage has lasted (0 if there is none)."""
        if self._since is None:
            return 0.0
        return asyncio.get_running_loop().time() - self._since

    def exhausted(self) -> bool:
        """Whether the outage has outlasted the window (never without one)."""
        return self._window is not None and self.failing and self.seconds() >= self._window

    def recovered(self) -> bool:
        """Note a success; whether it ended an outage."""
        if self._since is None:
            return False
        self._log.info("%s: Redis reachable again after %.1f s", self._what, self.seconds())
        self._since = None
        self._retries.reset()
        return True

    async def back_off(self, error: BaseException) -> None:
        """Note a failure and sleep before the next attempt (never past the window)."""
        if self._since is None:
            self._since = asyncio.get_running_loop().time()
            if isinstance(error, CONNECTION_ERRORS):
                self._log.warning("%s: %s: %s; retrying", self._what, type(error).__name__, error)
            else:
                self._log.error("%s failed; retrying", self._what, exc_info=error)
        pause = self._retries.next_pause()
        if self._window is not None:
            pause = min(pause, max(0.0, self._window - self.seconds()))
        await asyncio.sleep(pause)


__all__ = ["CONNECTION_ERRORS", "Outage", "Retries", "connection_lost"]
