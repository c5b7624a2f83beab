"""Which delivered runs a worker process lets onto its loop, and when.

Celery hands a delivery to a pool thread at once (prefetch is bounded by the run slots,
``AHP_WORKER_RUNS``). Before the run reaches the loop, its pool thread waits here, never
the loop:

- **while the loop lags** (``workers.loop_lag``) past ``AHP_WORKER_MAX_LOOP_LAG``: a loop
  too busy to keep its runs' events flowing takes no new run;
- **for a start slot**: at most ``STARTS_AT_ONCE`` runs are starting at a time (claim,
  profile, graph, up to the moment the run's lease is with the renewer). A burst of a
  thousand deliveries then reaches the loop as a stream of starts, not as a thousand
  claims at once whose replies the loop would take longer to process than their leases'
  renewal deadline.
"""

from __future__ import annotations

import threading

from .loop_lag import LoopLag

STARTS_AT_ONCE = 32
"""Runs of one process between admission and their lease reaching the renewer."""


class StartTicket:
    """A start slot taken; :meth:`started` gives it back (once, from any thread)."""

    def __init__(self, slots: threading.BoundedSemaphore) -> None:
        self._slots = slots
        self._lock = threading.Lock()
        self._held = True

    def started(self) -> None:
        with self._lock:
            if not self._held:
                return
            self._held = False
        self._slots.release()


class RunAdmission:
    def __init__(
        self, lag: LoopLag, max_lag: float, *, starts_at_once: int = STARTS_AT_ONCE
    ) -> None:
        self._lag = lag
        self._max_lag = max_lag
        self._slots = threading.BoundedSemaphore(starts_at_once)

    def admit(self, stopping: threading.Event) -> StartTicket | None:
        """Block the calling pool thread until the run may start; ``None`` if ``stopping``
        was set meanwhile (the delivery is to be handed back)."""
        while not stopping.is_set():
            if not self._lag.wait_until_below(self._max_lag, stopping):
                return None
            if self._slots.acquire(timeout=0.05):
                if stopping.is_set():
                    self._slots.release()
                    return None
                return StartTicket(self._slots)
        return None


__all__ = ["STARTS_AT_ONCE", "RunAdmission", "StartTicket"]
