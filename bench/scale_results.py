"""What ``bench/scale.py`` measures, as data: the plan, every task's chunks and
outcome, the samples of the node, the CPU of a window, and a run's results with their
failures (the report is ``bench/scale_report.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from bench import scale_profiles
from bench.scale_model import stamps
from bench.scale_probes import ProcessProfile, machine_busy

MIB = 1024 * 1024


@dataclass(frozen=True)
class Plan:
    tasks: int = 1000
    processes: int = 2
    runs_per_process: int = 500
    prefork_tasks: int = 40
    prefork_processes: int = 1
    prefork_concurrency: int = 8
    sse_streams: int = 500
    model_seconds: float = scale_profiles.DEFAULT_SECONDS
    chunks: int = scale_profiles.DEFAULT_CHUNKS
    task_timeout: float = 240.0
    quiet_wait: float = 120.0  # at most this long for a quiet machine before each window
    warm_up_per_process: int = 4
    profile: bool = False

    @property
    def model_env(self) -> dict[str, str]:
        return scale_profiles.environment(self.model_seconds, self.chunks)


# -- every task's chunks and outcome --------------------------------------------------------


@dataclass
class Streams:
    """Every task's fate and every chunk it streamed: a task is ``completed`` only when
    it ended ``Completed`` with the ``chunks`` stamps in order and its caller received
    each of them exactly once, in order."""

    chunks: int
    started: int = 0
    completed: int = 0
    fates: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)  # seconds, one per chunk received
    received: int = 0  # distinct chunks received
    duplicates: int = 0  # a chunk received more than once
    disordered: int = 0  # tasks whose chunks did not arrive in order
    gaps: int = 0  # events the caller's subscription reported dropped
    whole_messages: int = 0  # tasks whose chunks came in one MessageCompleted, no deltas
    first_problem: str = ""

    @property
    def expected(self) -> int:
        return self.started * self.chunks

    @property
    def lost(self) -> int:
        return self.expected - self.received

    @property
    def not_completed(self) -> int:
        return self.started - self.completed

    def account(self, indices: Sequence[int], fate: str, output: str, detail: object) -> None:
        """One task: the chunk indices as received, its outcome's type (or the error that
        ended following it) and its output text."""
        distinct = {index for index in indices if 0 <= index < self.chunks}
        self.received += len(distinct)
        self.duplicates += len(indices) - len(set(indices))
        firsts = list(dict.fromkeys(indices))
        if firsts != sorted(firsts):
            self.disordered += 1
        if fate == "Completed":
            produced = [index for index, _ in stamps(output)]
            if produced != list(range(self.chunks)):
                fate = f"Completed(not {self.chunks} chunks in order)"
            elif len(indices) != self.chunks or len(distinct) != self.chunks:
                fate = "Completed(chunks lost or repeated on the way)"
            elif firsts != sorted(firsts):
                fate = "Completed(chunks out of order on the way)"
        if fate == "Completed":
            self.completed += 1
        elif not self.first_problem:
            self.first_problem = f"{fate}: {detail!r}"[:400]
        self.fates[fate] += 1

    def failures(self, label: str) -> list[str]:
        found = []
        if self.not_completed:
            fates = ", ".join(f"{kind}={n}" for kind, n in sorted(self.fates.items()))
            found.append(
                f"{label}: {self.not_completed} of {self.started} tasks did not complete "
                f"({fates}); {self.first_problem}"
            )
        if self.lost:
            found.append(f"{label}: {self.lost} of {self.expected} chunks never arrived")
        if self.duplicates:
            found.append(f"{label}: {self.duplicates} chunks arrived twice")
        if self.disordered:
            found.append(f"{label}: {self.disordered} tasks received chunks out of order")
        if self.gaps:
            found.append(f"{label}: {self.gaps} events dropped in the caller's subscriptions")
        return found


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def latency_ms(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": percentile(values, 0.5) * 1000,
        "p95": percentile(values, 0.95) * 1000,
        "p99": percentile(values, 0.99) * 1000,
        "max": (max(values) if values else float("nan")) * 1000,
    }


# -- the node's samples ------------------------------------------------------------------


@dataclass
class Peak:
    """One node process at the sample where it had the most runs in flight."""

    inflight: int = 0
    rss: int = 0
    at: float = 0.0  # seconds into the window


@dataclass
class Samples:
    idle_rss: dict[str, int]
    peaks: dict[str, Peak] = field(default_factory=dict)
    connections_at_peak: dict[str, int] = field(default_factory=dict)
    connections_max: dict[str, int] = field(default_factory=dict)
    total_at_peak: int = 0  # runs in flight over the node at the connection sample


# -- CPU -----------------------------------------------------------------------------------


@dataclass
class CpuWindow:
    wall: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)  # seconds by process group
    other: float = 0.0  # the rest of the machine meanwhile
    waited: float = 0.0  # seconds waited for a quiet machine before the window
    quiet: bool = True  # whether it was quiet then (else the wait ran out)

    @property
    def total(self) -> float:
        return sum(self.parts.values())


async def wait_for_quiet(
    groups: Mapping[str, Callable[[], float]], limit: float, *, cores: int, threshold: float = 0.1
) -> tuple[float, bool]:
    """Wait (at most ``limit`` seconds) until processes outside ``groups`` used less than
    ``threshold`` of the machine for three seconds running; how long it waited, and
    whether it got quiet. On a shared machine a window that starts under load measures
    the load."""
    started = time.perf_counter()
    quiet = 0
    while True:
        own, busy = sum(read() for read in groups.values()), machine_busy()
        await asyncio.sleep(1.0)
        other = machine_busy() - busy - (sum(read() for read in groups.values()) - own)
        quiet = quiet + 1 if other < threshold * cores else 0
        waited = time.perf_counter() - started
        if quiet >= 3:
            return waited, True
        if waited >= limit:
            return waited, False


@contextlib.contextmanager
def cpu_window(groups: Mapping[str, Callable[[], float]]) -> Iterator[CpuWindow]:
    """CPU seconds each group used inside the window (``groups``: label -> reading)."""
    window = CpuWindow()
    before = {label: read() for label, read in groups.items()}
    busy, started = machine_busy(), time.perf_counter()
    try:
        yield window
    finally:
        window.wall = time.perf_counter() - started
        window.parts = {label: read() - before[label] for label, read in groups.items()}
        window.other = max(0.0, machine_busy() - busy - window.total)


# -- results --------------------------------------------------------------------------------


@dataclass
class Calls:
    """Model calls of the measured tasks, from the model's own counters."""

    tasks_called: int = 0
    calls: int = 0
    called_twice: int = 0  # tasks with more than one call
    extra: int = 0  # calls beyond one per task
    redelivered: int = 0  # task records with deliveries > 1 (ours only)
    recoveries: int = 0  # sweeper republications over the measured tasks (ours only)


@dataclass
class RunResult:
    label: str
    layout: str
    streams: Streams
    cpu: CpuWindow
    samples: Samples
    peak_by_pid: dict[int, int]
    peak_all: int
    calls: Calls
    cleanup_errors: int = 0
    profiles: list[ProcessProfile] = field(default_factory=list)

    @property
    def tasks(self) -> int:
        return self.streams.started

    @property
    def per_second(self) -> float:
        return self.streams.completed / self.cpu.wall if self.cpu.wall > 0 else float("nan")

    @property
    def cpu_ms_per_task(self) -> float:
        done = self.streams.completed
        return self.cpu.total * 1000 / done if done else float("nan")

    def rss_per_run(self) -> float:
        """(RSS at the peak - idle RSS) / runs in flight then, over the node, in bytes."""
        added = sum(
            peak.rss - self.samples.idle_rss.get(label, 0)
            for label, peak in self.samples.peaks.items()
        )
        inflight = sum(peak.inflight for peak in self.samples.peaks.values())
        return added / inflight if inflight else float("nan")

    def rss_whole_per_run(self) -> float:
        """RSS at the peak / runs in flight then (the whole node's memory per run)."""
        total = sum(peak.rss for peak in self.samples.peaks.values())
        inflight = sum(peak.inflight for peak in self.samples.peaks.values())
        return total / inflight if inflight else float("nan")


@dataclass
class SseResult:
    streams: Streams
    cpu: CpuWindow
    samples: Samples
    peak_all: int


@dataclass
class LangGraphDevResult:
    """(f): the same graph and model on ``langgraph dev``, driven over HTTP from here."""

    jobs: int  # --n-jobs-per-worker
    streams: Streams
    cpu: CpuWindow
    idle_rss: int  # the server's process tree after the warm-up
    peak_rss: int
    peak_inflight: int  # streams between their first and last chunk, seen by the client
    rss_inflight: int  # streams in flight at the sample of the peak RSS

    @property
    def per_second(self) -> float:
        return self.streams.completed / self.cpu.wall if self.cpu.wall > 0 else float("nan")


@dataclass
class Results:
    threads: RunResult | None = None
    prefork: RunResult | None = None
    sse: SseResult | None = None
    reference: RunResult | None = None
    langgraph_dev: LangGraphDevResult | None = None
    langgraph_dev_note: str = "not measured (no --langgraph-dev given)"
    aborted: list[str] = field(default_factory=list)

    def failures(self) -> list[str]:
        found = list(self.aborted)
        for label, result in (
            ("(a)", self.threads),
            ("(b)", self.prefork),
            ("(d)", self.sse),
            ("(e)", self.reference),
        ):
            if result is not None:
                found += result.streams.failures(label)
        return found
