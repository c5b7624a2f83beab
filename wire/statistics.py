"""The deployment's task statistics, as the Lua scripts keep them (``Keys.task_statistics``).

Every process that starts, claims or settles a task updates one Redis hash in the same
atomic step, so the figures cover the whole pool (every caller and worker), survive
restarts of any process, and cost one HINCRBY or two per step. This module turns the hash
into typed records; ``harness.api`` renders them for Prometheus.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

HISTOGRAM_BOUNDS: tuple[str, ...] = (
    "0.005",
    "0.01",
    "0.025",
    "0.05",
    "0.1",
    "0.25",
    "0.5",
    "1",
    "2.5",
    "5",
    "10",
    "30",
    "60",
    "300",
)
"""Upper bounds in seconds, as the Lua prelude spells them (``BOUNDS`` in ``_prelude.lua``);
an observation above the last one counts in ``+Inf``."""


class TaskTiming(StrEnum):
    """The two histograms the scripts keep."""

    DURATION = "duration"
    """From the start (``start_task.lua``) to the settle, for every settled task."""
    WAIT = "wait"
    """From the start to the first claim by a worker (time to start)."""


@dataclass(frozen=True, slots=True)
class Histogram:
    """A Prometheus-style histogram: cumulative counts per upper bound (seconds)."""

    buckets: tuple[tuple[float, int], ...]
    """``(upper bound in seconds, observations <= bound)``, ascending, ending with inf."""
    total: timedelta
    count: int


@dataclass(frozen=True, slots=True)
class TaskStatistics:
    started: int
    """Tasks started since the counters began (queued ones included)."""
    settled: Mapping[str, int]
    """Settled tasks by terminal state (``completed``, ``failed``, ``cancelled``,
    ``unresolved``)."""
    queued: int
    """Tasks waiting behind their session's running task now (``enqueue``)."""
    duration: Histogram
    wait: Histogram
    parked: int = 0
    """Tasks waiting for their tenant's running limit now (docs/tenants.md)."""


TERMINAL_STATES = ("completed", "failed", "cancelled", "unresolved")


def _histogram(fields: Mapping[str, str], name: str) -> Histogram:
    running = 0
    buckets: list[tuple[float, int]] = []
    for bound in (*HISTOGRAM_BOUNDS, "+Inf"):
        running += int(fields.get(f"{name}:{bound}", "0"))
        buckets.append((float("inf") if bound == "+Inf" else float(bound), running))
    return Histogram(
        tuple(buckets),
        timedelta(milliseconds=int(fields.get(f"{name}:sum_ms", "0"))),
        int(fields.get(f"{name}:count", "0")),
    )


def parse_task_statistics(fields: Mapping[str, str]) -> TaskStatistics:
    """The statistics hash (field -> decimal string) as a record; absent fields are 0."""
    return TaskStatistics(
        started=int(fields.get("started", "0")),
        settled={state: int(fields.get(f"settled:{state}", "0")) for state in TERMINAL_STATES},
        queued=max(0, int(fields.get("queued", "0"))),
        duration=_histogram(fields, TaskTiming.DURATION),
        wait=_histogram(fields, TaskTiming.WAIT),
        parked=max(0, int(fields.get("parked", "0"))),
    )


__all__ = [
    "HISTOGRAM_BOUNDS",
    "TERMINAL_STATES",
    "Histogram",
    "TaskStatistics",
    "TaskTiming",
    "parse_task_statistics",
]
