"""How late the worker's event loop runs what is handed to it, and the admission gate
that keeps a lagging loop from taking more runs.

A thread posts a probe to the loop every ``every`` seconds (``call_soon_threadsafe``)
and notes how long it waited before the loop ran it. The lag is the largest wait seen
over the last ``window``, or, while a probe is still waiting, how long it has waited so
far, so a loop that stopped turning reads as lagging at once.

A run message only reaches the loop once the lag is below the limit
(:meth:`LoopLag.wait_until_below`, called from the pool thread that holds the
delivery): a loop busy enough to delay its runs' events stops taking new runs before
their work could pile up further. Lease renewals do not depend on it (they have a thread
of their own, ``workers.lease_renewer``); the gate is about the runs already in flight.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from contextlib import suppress

PROBE_EVERY = 0.05
"""Seconds between two probes."""
WINDOW = 1.0
"""Seconds a measured lag is remembered."""


class LoopLag:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, *, every: float = PROBE_EVERY, window: float = WINDOW
    ) -> None:
        self._loop = loop
        self._every = every
        self._window = window
        self._samples: deque[tuple[float, float]] = deque()
        self._waiting_since: float | None = None
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="ahp-loop-lag", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=2)

    def current(self) -> float:
        """Seconds: the loop's recent lag (see the module docstring)."""
        now = time.monotonic()
        with self._changed:
            while self._samples and self._samples[0][0] < now - self._window:
                self._samples.popleft()
            worst = max((lag for _, lag in self._samples), default=0.0)
            if self._waiting_since is not None:
                worst = max(worst, now - self._waiting_since)
            return worst

    def wait_until_below(self, limit: float, stopping: threading.Event) -> bool:
        """Block the calling thread (never the loop's) until the lag is below ``limit``;
        False if ``stopping`` was set meanwhile."""
        while not stopping.is_set() and not self._stopping.is_set():
            if self.current() < limit:
                return True
            with self._changed:
                self._changed.wait(self._every)
        return False

    def _serve(self) -> None:
        while not self._stopping.wait(self._every):
            with self._changed:
                if self._waiting_since is not None:
                    continue  # the last probe has not run yet: its wait is the lag
                posted = self._waiting_since = time.monotonic()
            with suppress(RuntimeError):  # the loop closed
                self._loop.call_soon_threadsafe(self._arrived, posted)

    def _arrived(self, posted: float) -> None:
        now = time.monotonic()
        with self._changed:
            self._samples.append((now, now - posted))
            self._waiting_since = None
            self._changed.notify_all()


__all__ = ["PROBE_EVERY", "WINDOW", "LoopLag"]
