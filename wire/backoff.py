"""One way to wait out a Redis outage, for every loop on either side that must.

An :class:`Outage` tracks one consumer's run of failures: it sleeps with exponential backoff
(redis-py's ``ExponentialBackoff``) between attempts, logs once when an outage begins (a
warning for connection errors, the traceback for anything else) and once when it ends, and,
when given a window, says when the outage has lasted too long to keep trying.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from redis.backoff import ExponentialBackoff
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
        self._backoff = ExponentialBackoff(cap=cap.total_seconds(), base=first.total_seconds())
        self._window = None if window is None else window.total_seconds()
        self._log = logger
        self._since: float | None = None
        self._failures = 0

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
        self._failures = 0
        return True

    async def back_off(self, error: BaseException) -> None:
        """Note a failure and sleep before the next attempt (never past the window)."""
        if self._since is None:
            self._since = asyncio.get_running_loop().time()
            if isinstance(error, CONNECTION_ERRORS):
                self._log.warning("%s: %s: %s; retrying", self._what, type(error).__name__, error)
            else:
                self._log.error("%s failed; retrying", self._what, exc_info=error)
        pause = self._backoff.compute(self._failures)
        self._failures += 1
        if self._window is not None:
            pause = min(pause, max(0.0, self._window - self.seconds()))
        await asyncio.sleep(pause)


__all__ = ["CONNECTION_ERRORS", "Outage"]
