#!/usr/bin/env python
"""Latency and throughput of the Celery AHP harness, side by side with two baselines.

    python bench/latency_throughput.py [--quick] [--redis-url URL] [--worker-counts 1,2]
                                       [--log-dir DIR] [--require-targets]

Systems compared, all in ONE run against one Redis (an embedded Redis 8 with search+JSON
unless ``--redis-url`` is given):

* ours       -- ``harness.CeleryHarness`` (caller in this process) with a pool of separate
                ``celery -A workers.main worker`` OS processes, prefork ``-c 1`` each;
* reference  -- ``agent_harness_protocol_langgraph.LangGraphHarness`` in this process, on
                an ``AsyncRedisSaver`` against the same Redis (ours runs a fenced subclass
                of that saver in its workers);
* no-op      -- a raw Celery round trip: ``bench.noop_app`` (same Celery configuration as
                ours) whose task pushes a token onto a Redis list the caller BLPOPs.

Both harnesses run the same deterministic in-process chat model
(``workers.scripted_model:ScriptedChatModel``, profile ``scripted``) in (a)-(c).

Scenarios:
 (a) fresh-session latency: create a session + one task to its outcome (release untimed);
     samples of the three systems are interleaved (rotating order).
 (b) the 1st vs the 200th task of ONE session (median over a window of tasks).
 (c) throughput: S concurrent sessions x T sequential tasks, ours with 1 and 2 worker
     processes, the reference in one event loop, raw no-op with the same worker counts.
 (d) event latency, ours only (1 worker): a bench model running in the worker
     (``bench.clock_model:ClockChatModel``, profile ``clock`` of the registry
     ``bench.clock_profiles:PROFILES``, loaded by caller and workers through
     ``AHP_PROFILES``) streams 20 chunks 5 ms apart, each carrying ``time.time_ns()`` read
     as the model yields it; the caller follows ``task.events()`` and, for each
     ``MessageDelta``, subtracts that stamp from ``time.time_ns()`` at receipt. Both
     processes run on this machine and share CLOCK_REALTIME. p50/p95/max over every chunk
     of N tasks (one at a time, a fresh session each); every chunk is accounted for (sent,
     received, lost, received twice).
 (e) cancel latency, ours only (1 worker): a task of profile ``clock-slow`` (a chunk every
     10 ms for up to 10 s) is cancelled (``request_cancellation()``) once its first chunk
     reached the caller; the time from the call to the terminal outcome, which must be
     ``Cancelled`` (anything else is a failure).
 (f) floors (``bench/floors.py``): the same graph turn bare in this process, without a
     checkpointer and on the upstream ``AsyncRedisSaver``, sessions as in (c): the CPU
     per task any harness of that turn and saver spends before its own work.

Every scenario uses a fresh namespace/queue and its own worker processes. Every outcome
is counted by type (and Completed outputs are checked for the scripted reply and for the
session context, or for every clock chunk in order), so a fast-but-failing run cannot
look good. Nothing here asserts timings; the "targets" block only reports.

Exit code: 1 when any scenario had a failure (a task that did not end as expected, a
session release that failed, a chunk lost or received twice, a cancel that did not end
``Cancelled``, a worker that died or a warm-up that failed: such a scenario is aborted
and the run goes on with the next). Unmet targets do not change it, unless
``--require-targets`` is given: then a run without failures exits 2 when a target is
not met (or could not be measured). Otherwise 0.

CPU is accounted per measured window (Linux /proc): the CPU of this run's processes (this
process, the workers with their pool children, the embedded Redis) and, separately, the
CPU everything else on the machine used meanwhile, so interference from other load is
visible next to the numbers it distorts. Under the throughput table, ours is split by
process, in ms per task: the caller (this process), the worker main processes, their
prefork pool children, Redis; each process counts what it used between the window's two
snapshots (one that exits inside the window takes its CPU with it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import celery  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402
from agent_harness_protocol import (  # noqa: E402
    AgentHarness,
    AgentSession,
    AgentTask,
    Cancelled,
    Completed,
    ContextRetentionDisposition,
    MessageDelta,
    ObservationGap,
    SessionSpec,
    TaskEvent,
    TaskRequest,
    TerminalEvent,
    TextInput,
    TextOutput,
    UserHistoryVisibility,
)
from agent_harness_protocol_langgraph import (  # noqa: E402
    CancellationSemantics as ReferenceCancellation,
)
from agent_harness_protocol_langgraph import LangGraphHarness  # noqa: E402
from celery import Celery  # noqa: E402
from langgraph.checkpoint.redis.aio import AsyncRedisSaver  # noqa: E402

from bench import clock_profiles, noop_app  # noqa: E402
from bench.cli_frame import main_into_section  # noqa: E402
from bench.clock_model import stamps  # noqa: E402
from bench.floors import Floors, event_transport_floor, measure_floors  # noqa: E402
from bench.results_page import RESULTS_PAGE, git_state  # noqa: E402
from harness import CeleryHarness, Settings  # noqa: E402
from tooling.embedded_redis import EmbeddedRedis  # noqa: E402
from wire.default_profiles import SCRIPTED  # noqa: E402
from workers.scripted_model import ScriptedChatModel  # noqa: E402

TASK_TIMEOUT = 60.0
WORKER_READY_TIMEOUT = 120.0
SPEC = SessionSpec(instructions="You are a benchmark assistant.", model=SCRIPTED.model_id)
REPLY_PREFIX = "[scripted model]"
SCENARIOS = frozenset("abcdef")
CLOCK_PROFILES = "bench.clock_profiles:PROFILES"
CLOCK_SPEC = SessionSpec(
    instructions="You are a benchmark clock.", model=clock_profiles.CLOCK.model_id
)


@dataclass(frozen=True)
class Plan:
    mode: str
    latency_samples: int  # (a) per system
    latency_warmup: int
    turns: int  # (b)
    window: int  # (b) moving-median window
    sessions: int  # (c)
    tasks_per_session: int  # (c)
    event_tasks: int  # (d) tasks of clock_profiles.EVENT_CHUNKS chunks each
    cancel_samples: int  # (e)
    worker_counts: tuple[int, ...] = (1, 2)


FULL = Plan(
    "full",
    latency_samples=50,
    latency_warmup=5,
    turns=200,
    window=10,
    sessions=50,
    tasks_per_session=20,
    event_tasks=20,
    cancel_samples=30,
)
QUICK = Plan(
    "quick",
    latency_samples=20,
    latency_warmup=3,
    turns=50,
    window=10,
    sessions=10,
    tasks_per_session=20,
    event_tasks=10,
    cancel_samples=10,
)


# -- outcome accounting -----------------------------------------------------------------


@dataclass
class Tally:
    """Every task's fate, by type; only checked ``Completed`` counts as ``ok``."""

    counts: Counter[str] = field(default_factory=Counter)
    cleanup_errors: int = 0
    first_problem: str = ""

    def outcome(self, outcome: Any, expect: str | None) -> None:
        kind = type(outcome).__name__
        if isinstance(outcome, Completed):
            output = outcome.output
            text = output.text if isinstance(output, TextOutput) else ""
            if not text.startswith(REPLY_PREFIX):
                kind = "Completed(unexpected output)"
            elif expect is not None and expect not in text:
                kind = "Completed(context lost)"
            else:
                kind = "ok"
        if kind != "ok" and not self.first_problem:
            self.first_problem = f"{kind}: {outcome!r}"[:400]
        self.counts[kind] += 1

    def record(self, kind: str, detail: object) -> None:
        """One fate of a scenario's own checking (``kind`` ``"ok"`` or what went wrong)."""
        if kind != "ok" and not self.first_problem:
            self.first_problem = f"{kind}: {detail!r}"[:400]
        self.counts[kind] += 1

    def error(self, error: BaseException) -> None:
        kind = f"error:{type(error).__name__}"
        if not self.first_problem:
            self.first_problem = f"{kind}: {error}"[:400]
        self.counts[kind] += 1

    def noop(self, ok: bool) -> None:
        self.counts["ok" if ok else "no reply"] += 1
        if not ok and not self.first_problem:
            self.first_problem = "no-op: no reply within the timeout"

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def ok(self) -> int:
        return self.counts.get("ok", 0)

    @property
    def clean(self) -> bool:
        return self.total > 0 and self.ok == self.total

    def describe(self) -> str:
        parts = [f"{kind}={count}" for kind, count in sorted(self.counts.items())]
        text = f"{self.ok}/{self.total} ok ({', '.join(parts) or 'nothing ran'})"
        if self.cleanup_errors:
            text += f", release errors={self.cleanup_errors}"
        return text


def expected_context(turn: int) -> str:
    """What the scripted reply of the ``turn``-th task of a session must quote: the
    question itself on the first task, the previous question (so context was carried)
    on every later one."""
    return repr(prompt(1 if turn == 1 else turn - 1))


def prompt(turn: int) -> str:
    return f"question {turn}"


# -- statistics -------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ms(value: float) -> str:
    return f"{value * 1000:8.2f}"


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")


# -- worker processes -------------------------------------------------------------------


class WorkerPool:
    """``count`` separate ``celery worker`` OS processes (prefork ``-c concurrency``).

    Each is started in its own session (process group = its pid), so its prefork
    children can be ended with it by that id.
    """

    def __init__(
        self,
        name: str,
        app_module: str,
        env: dict[str, str],
        queue: str,
        redis_url: str,
        count: int,
        log_dir: Path,
        concurrency: int = 1,
    ) -> None:
        self.name = name
        self.app_module = app_module
        self.env = env
        self.queue = queue
        self.redis_url = redis_url
        self.count = count
        self.concurrency = concurrency
        self.log_dir = log_dir
        self.nodes = [f"{name}-{index}@bench" for index in range(count)]
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        env = {key: value for key, value in os.environ.items() if not key.startswith("AHP_")}
        env.update(self.env)
        env["PYTHONPATH"] = os.pathsep.join(
            part for part in (str(ROOT), os.environ.get("PYTHONPATH", "")) if part
        )
        for node in self.nodes:
            log = (self.log_dir / f"{node.split('@')[0]}.log").open("wb")
            command = [
                sys.executable,
                "-m",
                "celery",
                "-A",
                self.app_module,
                "worker",
                "-P",
                "prefork",
                "-c",
                str(self.concurrency),
                "-Q",
                self.queue,
                "-n",
                node,
                "--loglevel",
                "warning",
            ]
            self.processes.append(
                subprocess.Popen(
                    command,
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
            log.close()

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes if process.poll() is None]

    def check_alive(self) -> None:
        for node, process in zip(self.nodes, self.processes, strict=True):
            if process.poll() is not None:
                raise RuntimeError(
                    f"worker {node} exited with {process.returncode}; see {self.log_dir}"
                )

    def wait_ready(self) -> None:
        control = Celery("bench_control", broker=self.redis_url, set_as_current=False)
        try:
            deadline = time.monotonic() + WORKER_READY_TIMEOUT
            missing = set(self.nodes)
            while missing:
                self.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"workers {sorted(missing)} not ready; see {self.log_dir}")
                for reply in control.control.ping(destination=sorted(missing), timeout=0.5) or ():
                    missing -= set(reply)
        finally:
            control.close()

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            # Prefork children of a main process that died abnormally (same group id).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        self.processes.clear()


class ProjectWorkers:
    """``count`` workers through the project's ``tooling.worker_process.WorkerProcess``
    (``celery -A workers.main worker -P prefork -c 1``), started one after the other."""

    def __init__(self, settings: Settings, count: int, log_dir: Path) -> None:
        from tooling.worker_process import WorkerProcess

        self.workers = [
            WorkerProcess(
                settings,
                concurrency=1,
                pool="prefork",
                loglevel="warning",
                log_path=log_dir / f"{settings.namespace}-{index}.log",
                name=f"{settings.namespace}-{index}",
            )
            for index in range(count)
        ]

    def start(self) -> None:
        pass  # ``wait_ready`` starts them: each start() waits for its ping

    def wait_ready(self) -> None:
        for worker in self.workers:
            worker.start(timedelta(seconds=WORKER_READY_TIMEOUT))

    @property
    def pids(self) -> list[int]:
        return [pid for worker in self.workers if (pid := worker.pid) is not None]

    def check_alive(self) -> None:
        for worker in self.workers:
            if not worker.running:
                raise RuntimeError(
                    f"worker {worker.hostname} exited with {worker.returncode}; "
                    f"log {worker.log_path}"
                )

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()


def project_worker_helper() -> bool:
    try:
        from tooling.worker_process import WorkerProcess  # noqa: F401
    except ImportError:
        return False
    return True


# -- CPU accounting ---------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_cpu(pid: int) -> float:
    """utime + stime of one live process, in seconds (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for thread in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{thread}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
    except OSError:
        pass
    return found


def tree_cpu(pids: Sequence[int]) -> float:
    """CPU seconds of the live processes ``pids`` and all their live descendants."""
    return sum(_tree(pids, set()).values())


def _tree(pids: Sequence[int], seen: set[int]) -> dict[int, float]:
    """CPU seconds by pid of the live processes ``pids`` and their live descendants,
    skipping those in ``seen`` (with their descendants) and adding the others to it."""
    found: dict[int, float] = {}
    stack = list(pids)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        found[pid] = _proc_cpu(pid)
        stack.extend(_children(pid))
    return found


CPU_PARTS = ("caller", "worker main", "pool children", "redis")


@dataclass(frozen=True)
class RunProcesses:
    """This run's processes at one moment: the caller (this process), the embedded Redis
    (``None`` for an external one), the worker main processes."""

    caller: int
    redis: int | None
    workers: tuple[int, ...]


CpuSnapshot = dict[str, dict[int, float]]
"""CPU seconds so far of each live process of this run, by part and pid."""


def cpu_snapshot(processes: RunProcesses) -> CpuSnapshot:
    """Each live process of this run, counted once, in one part: the Redis server; the
    worker main processes themselves; their descendants (the prefork pool children); the
    caller, with any other descendant of it (the workers and the embedded Redis are its
    children too, counted above)."""
    seen: set[int] = set()
    parts: CpuSnapshot = {part: {} for part in CPU_PARTS}
    if processes.redis is not None:
        parts["redis"] = _tree([processes.redis], seen)
    mains = [pid for pid in processes.workers if pid not in seen]
    parts["worker main"] = {pid: _proc_cpu(pid) for pid in mains}
    seen.update(mains)
    parts["pool children"] = _tree([child for pid in mains for child in _children(pid)], seen)
    parts["caller"] = _tree([processes.caller], seen)
    return parts


def cpu_used(start: CpuSnapshot, end: CpuSnapshot) -> dict[str, float]:
    """CPU seconds used between two snapshots, by part: each process alive at the end
    counts what it used since the start (all of it if it started meanwhile). A process
    that exited meanwhile is missing from the end, and its CPU in the window with it."""
    return {
        part: sum(cpu - start[part].get(pid, 0.0) for pid, cpu in end[part].items())
        for part in CPU_PARTS
    }


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (all cores), from /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


@dataclass
class CpuWindow:
    """CPU used during a window: by this run's processes, and by everything else."""

    wall: float = 0.0
    ours: float = 0.0  # bench process + its workers (+ the embedded Redis)
    machine: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)  # ``ours`` by CPU_PARTS

    @property
    def other(self) -> float:
        return max(0.0, self.machine - self.ours)

    def describe(self) -> str:
        cores = os.cpu_count() or 1
        if self.wall <= 0 or self.machine != self.machine:
            return "cpu: n/a"
        return (
            f"cpu: this run {self.ours:.1f} s, other processes {self.other:.1f} s "
            f"of {self.wall * cores:.1f} core-s"
        )


class CpuMeter:
    def __init__(self, processes: Callable[[], RunProcesses]) -> None:
        self._processes = processes

    @contextlib.contextmanager
    def window(self) -> Iterator[CpuWindow]:
        result = CpuWindow()
        start = (time.perf_counter(), cpu_snapshot(self._processes()), machine_busy())
        try:
            yield result
        finally:
            end = cpu_snapshot(self._processes())
            result.wall = time.perf_counter() - start[0]
            result.parts = cpu_used(start[1], end)
            result.ours = sum(result.parts.values())
            result.machine = machine_busy() - start[2]


# -- the systems ------------------------------------------------------------------------


class Bench:
    def __init__(
        self, redis_url: str, plan: Plan, log_dir: Path, redis_pid: int | None = None
    ) -> None:
        self.redis_url = redis_url
        self.plan = plan
        self.log_dir = log_dir
        self.pools: list[WorkerPool | ProjectWorkers] = []
        self.use_project_helper = project_worker_helper()
        self.redis_pid = redis_pid
        self.meter = CpuMeter(
            lambda: RunProcesses(
                os.getpid(), redis_pid, tuple(pid for pool in self.pools for pid in pool.pids)
            )
        )

    # infrastructure
    def new_settings(
        self, profile: str = "scripted", profiles: str = "wire.default_profiles:PROFILES"
    ) -> Settings:
        """A fresh namespace and queue (one per scenario); callers and workers of the
        scenario load the profile registry ``profiles``."""
        tag = uuid4().hex[:10]
        return Settings(
            redis_url=self.redis_url,
            namespace=f"bench-{tag}",
            queue=f"bench.{tag}",
            profiles=profiles,
            profile=profile,
        )

    async def start_pool(self, pool: WorkerPool | ProjectWorkers) -> WorkerPool | ProjectWorkers:
        self.pools.append(pool)
        pool.start()
        await asyncio.to_thread(pool.wait_ready)
        return pool

    async def stop_pool(self, pool: WorkerPool | ProjectWorkers) -> None:
        await asyncio.to_thread(pool.stop)
        if pool in self.pools:
            self.pools.remove(pool)

    def stop_all(self) -> None:
        for pool in self.pools:
            pool.stop()
        self.pools.clear()

    async def ours_workers(self, settings: Settings, count: int) -> WorkerPool | ProjectWorkers:
        if self.use_project_helper:
            return await self.start_pool(ProjectWorkers(settings, count, self.log_dir))
        env = {
            "AHP_REDIS_URL": settings.redis_url,
            "AHP_NAMESPACE": settings.namespace,
            "AHP_QUEUE": settings.queue,
            "AHP_PROFILES": settings.profiles,
            "AHP_PROFILE": settings.profile,
        }
        pool = WorkerPool(
            settings.namespace,
            "workers.main",
            env,
            settings.queue,
            self.redis_url,
            count,
            self.log_dir,
        )
        return await self.start_pool(pool)

    async def noop_workers(self, queue: str, count: int) -> WorkerPool:
        env = {"BENCH_NOOP_REDIS_URL": self.redis_url, "BENCH_NOOP_QUEUE": queue}
        name = queue.replace(".", "-")
        pool = WorkerPool(name, "bench.noop_app", env, queue, self.redis_url, count, self.log_dir)
        await self.start_pool(pool)
        return pool

    @contextlib.asynccontextmanager
    async def reference(self) -> Any:
        """The in-process reference on an ``AsyncRedisSaver`` whose client has the same
        connection pool as the workers' checkpoint client (blocking, 256 connections).

        With a plain ``redis_url`` the saver gets redis-py's default non-blocking pool of
        100 connections, and 50 concurrent sessions then fail some tasks with
        ``MaxConnectionsError: Too many connections`` (``aget_tuple`` gathers searches)."""
        pool = aioredis.BlockingConnectionPool.from_url(
            self.redis_url, max_connections=256, timeout=30, health_check_interval=30
        )
        client = aioredis.Redis(connection_pool=pool)
        async with AsyncRedisSaver(redis_client=client) as saver:
            await saver.asetup()
            harness = LangGraphHarness(
                ScriptedChatModel(),
                model_id=SCRIPTED.model_id,
                checkpointer=saver,
                cancellation_semantics=(
                    ReferenceCancellation.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED
                ),
                context_retention=ContextRetentionDisposition.MATERIALIZED,
                history_visibility=UserHistoryVisibility.HIDDEN,
            )
            try:
                yield harness
            finally:
                try:
                    await harness.aclose()
                finally:
                    await client.aclose()
                    await pool.disconnect()

    @contextlib.asynccontextmanager
    async def ours(self, settings: Settings) -> Any:
        harness = CeleryHarness(settings, profile=settings.profile)
        try:
            yield harness
        finally:
            with contextlib.suppress(Exception):
                await harness.aclose()


class NoopClient:
    """The caller side of the raw Celery round trip (publish in a thread, like ours)."""

    def __init__(self, redis_url: str, queue: str) -> None:
        self.queue = queue
        self.app = noop_app.create_app(redis_url, queue)
        pool = aioredis.BlockingConnectionPool.from_url(
            redis_url, max_connections=256, timeout=30, decode_responses=True
        )
        self.redis = aioredis.Redis(connection_pool=pool)

    async def round_trip(self, tally: Tally) -> float | None:
        token = uuid4().hex
        key = f"bench-noop:reply:{token}"
        started = time.perf_counter()
        try:
            await asyncio.to_thread(
                self.app.send_task,
                noop_app.NOOP_TASK,
                args=[key, token],
                queue=self.queue,
                retry=False,
            )
            item = await self.redis.blpop([key], timeout=TASK_TIMEOUT)
        except Exception as error:
            tally.error(error)
            return None
        elapsed = time.perf_counter() - started
        ok = item is not None and item[1] == token
        tally.noop(ok)
        return elapsed if ok else None

    async def aclose(self) -> None:
        await self.redis.aclose()
        await self.redis.connection_pool.disconnect()
        await asyncio.to_thread(self.app.close)


# -- task helpers -----------------------------------------------------------------------


async def run_task(session: AgentSession, turn: int, tally: Tally) -> float | None:
    """One task to its outcome; its latency, or None if it did not complete as expected."""
    started = time.perf_counter()
    try:
        task = await session.start_task(TaskRequest(TextInput(prompt(turn))))
        async with asyncio.timeout(TASK_TIMEOUT):
            outcome = await task.await_outcome()
    except Exception as error:
        tally.error(error)
        return None
    elapsed = time.perf_counter() - started
    before = tally.ok
    tally.outcome(outcome, expected_context(turn))
    return elapsed if tally.ok > before else None


async def release(session: AgentSession, tally: Tally) -> None:
    try:
        await session.release()
    except Exception:
        tally.cleanup_errors += 1


async def release_all(sessions: Sequence[AgentSession], tally: Tally, parallel: int = 5) -> None:
    gate = asyncio.Semaphore(parallel)

    async def one(session: AgentSession) -> None:
        async with gate:
            await release(session, tally)

    await asyncio.gather(*(one(session) for session in sessions))


async def fresh_session_sample(harness: AgentHarness, tally: Tally) -> float | None:
    """Create a session and run one task to its outcome (timed); release (untimed)."""
    started = time.perf_counter()
    try:
        session = await harness.create_session(SPEC)
    except Exception as error:
        tally.error(error)
        return None
    try:
        task = await session.start_task(TaskRequest(TextInput(prompt(1))))
        async with asyncio.timeout(TASK_TIMEOUT):
            outcome = await task.await_outcome()
        elapsed = time.perf_counter() - started
        before = tally.ok
        tally.outcome(outcome, expected_context(1))
        return elapsed if tally.ok > before else None
    except Exception as error:
        tally.error(error)
        return None
    finally:
        await release(session, tally)


async def warm_up(harness: AgentHarness, sessions: int, turns: int) -> None:
    """Untimed: import paths, compiled graphs, connections, prefork children all hot."""
    scratch = Tally()

    async def one() -> None:
        session = await harness.create_session(SPEC)
        try:
            for turn in range(1, turns + 1):
                await run_task(session, turn, scratch)
        finally:
            await release(session, scratch)

    await asyncio.gather(*(one() for _ in range(sessions)))
    if not scratch.clean:
        raise RuntimeError(f"warm-up failed: {scratch.describe()}; {scratch.first_problem}")


async def session_chains(
    harness: AgentHarness, sessions: int, per_session: int, tally: Tally, meter: CpuMeter
) -> CpuWindow:
    """``sessions`` concurrent sessions of ``per_session`` sequential tasks, timed from the
    first session creation to the last outcome. Releases afterwards, untimed."""
    opened: list[AgentSession] = []

    async def chain() -> None:
        try:
            session = await harness.create_session(SPEC)
        except Exception as error:
            for _ in range(per_session):
                tally.error(error)
            return
        opened.append(session)
        for turn in range(1, per_session + 1):
            await run_task(session, turn, tally)

    with meter.window() as window:
        await asyncio.gather(*(chain() for _ in range(sessions)))
    await release_all(opened, tally)
    return window


async def noop_chains(
    client: NoopClient, chains: int, per_chain: int, tally: Tally, meter: CpuMeter
) -> CpuWindow:
    async def chain() -> None:
        for _ in range(per_chain):
            await client.round_trip(tally)

    with meter.window() as window:
        await asyncio.gather(*(chain() for _ in range(chains)))
    return window


# -- scenarios --------------------------------------------------------------------------


@dataclass
class LatencyResult:
    label: str
    samples: list[float]
    tally: Tally


@dataclass
class LongSessionResult:
    label: str
    latencies: list[float | None]
    tally: Tally
    window: int
    cpu: CpuWindow

    def window_median(self, start: int) -> float:
        values = [v for v in self.latencies[start : start + self.window] if v is not None]
        return statistics.median(values) if values else float("nan")

    @property
    def first(self) -> float:
        return self.window_median(0)

    @property
    def last(self) -> float:
        return self.window_median(len(self.latencies) - self.window)


@dataclass
class ThroughputResult:
    label: str
    workers: str
    tasks: int
    cpu: CpuWindow
    tally: Tally

    @property
    def seconds(self) -> float:
        return self.cpu.wall

    @property
    def per_second(self) -> float:
        return self.tally.ok / self.seconds if self.seconds else float("nan")

    @property
    def cpu_ms_per_task(self) -> float:
        return self.cpu.ours / self.tally.ok * 1000 if self.tally.ok else float("nan")


async def scenario_latency(bench: Bench) -> tuple[list[LatencyResult], CpuWindow]:
    plan = bench.plan
    settings = bench.new_settings()
    noop_queue = f"bench.noop.{uuid4().hex[:10]}"
    ours_pool = await bench.ours_workers(settings, 1)
    noop_pool = await bench.noop_workers(noop_queue, 1)
    ours = LatencyResult("ours: CeleryHarness, 1 worker process (prefork -c 1)", [], Tally())
    reference = LatencyResult("reference: LangGraphHarness in-process", [], Tally())
    noop = LatencyResult("raw Celery no-op round trip, 1 worker (prefork -c 1)", [], Tally())
    client = NoopClient(bench.redis_url, noop_queue)
    try:
        async with bench.ours(settings) as ours_harness, bench.reference() as ref_harness:
            await warm_up(ours_harness, 2, 3)
            await warm_up(ref_harness, 2, 3)
            warm = Tally()
            for _ in range(plan.latency_warmup):
                await fresh_session_sample(ours_harness, warm)
                await fresh_session_sample(ref_harness, warm)
                await client.round_trip(warm)
            if not warm.clean:
                raise RuntimeError(
                    f"latency warm-up failed: {warm.describe()}; {warm.first_problem}"
                )

            async def sample_ours() -> None:
                value = await fresh_session_sample(ours_harness, ours.tally)
                if value is not None:
                    ours.samples.append(value)

            async def sample_reference() -> None:
                value = await fresh_session_sample(ref_harness, reference.tally)
                if value is not None:
                    reference.samples.append(value)

            async def sample_noop() -> None:
                value = await client.round_trip(noop.tally)
                if value is not None:
                    noop.samples.append(value)

            order: list[Callable[[], Awaitable[None]]] = [
                sample_ours,
                sample_reference,
                sample_noop,
            ]
            with bench.meter.window() as cpu:
                for index in range(plan.latency_samples):
                    rotation = index % len(order)
                    for sample in order[rotation:] + order[:rotation]:
                        await sample()
            ours_pool.check_alive()
            noop_pool.check_alive()
    finally:
        await client.aclose()
        await bench.stop_pool(ours_pool)
        await bench.stop_pool(noop_pool)
    return [ours, reference, noop], cpu


async def long_session(harness: AgentHarness, turns: int, tally: Tally) -> list[float | None]:
    session = await harness.create_session(SPEC)
    latencies: list[float | None] = []
    try:
        for turn in range(1, turns + 1):
            latencies.append(await run_task(session, turn, tally))
    finally:
        await release(session, tally)
    return latencies


async def scenario_long_session(bench: Bench) -> list[LongSessionResult]:
    plan = bench.plan
    settings = bench.new_settings()
    pool = await bench.ours_workers(settings, 1)
    try:
        async with bench.ours(settings) as harness:
            await warm_up(harness, 1, 3)
            tally = Tally()
            with bench.meter.window() as cpu:
                latencies = await long_session(harness, plan.turns, tally)
            ours = LongSessionResult(
                "ours: CeleryHarness, 1 worker process (prefork -c 1)",
                latencies,
                tally,
                plan.window,
                cpu,
            )
        pool.check_alive()
    finally:
        await bench.stop_pool(pool)
    async with bench.reference() as harness:
        await warm_up(harness, 1, 3)
        tally = Tally()
        with bench.meter.window() as cpu:
            latencies = await long_session(harness, plan.turns, tally)
        reference = LongSessionResult(
            "reference: LangGraphHarness in-process", latencies, tally, plan.window, cpu
        )
    return [ours, reference]


async def scenario_throughput(bench: Bench) -> list[ThroughputResult]:
    plan = bench.plan
    sessions, per_session = plan.sessions, plan.tasks_per_session
    tasks = sessions * per_session
    results: list[ThroughputResult] = []

    async with bench.reference() as harness:
        await warm_up(harness, 2, 3)
        tally = Tally()
        cpu = await session_chains(harness, sessions, per_session, tally, bench.meter)
        results.append(
            ThroughputResult(
                "reference: LangGraphHarness in-process", "1 event loop", tasks, cpu, tally
            )
        )

    for count in plan.worker_counts:
        settings = bench.new_settings()
        pool = await bench.ours_workers(settings, count)
        try:
            async with bench.ours(settings) as harness:
                await warm_up(harness, 2 * count, 3)
                tally = Tally()
                cpu = await session_chains(harness, sessions, per_session, tally, bench.meter)
            pool.check_alive()
        finally:
            await bench.stop_pool(pool)
        results.append(
            ThroughputResult(
                "ours: CeleryHarness", f"{count} proc x prefork -c 1", tasks, cpu, tally
            )
        )

        queue = f"bench.noop.{uuid4().hex[:10]}"
        pool = await bench.noop_workers(queue, count)
        client = NoopClient(bench.redis_url, queue)
        try:
            await noop_chains(client, 2 * count, 3, Tally(), bench.meter)
            tally = Tally()
            cpu = await noop_chains(client, sessions, per_session, tally, bench.meter)
            pool.check_alive()
        finally:
            await client.aclose()
            await bench.stop_pool(pool)
        results.append(
            ThroughputResult("raw Celery no-op", f"{count} proc x prefork -c 1", tasks, cpu, tally)
        )
    return results


@dataclass
class EventLatencyResult:
    """(d): one latency per chunk received, and every chunk accounted for."""

    label: str
    tasks: int
    chunks_per_task: int
    latencies: list[float] = field(default_factory=list)  # seconds, one per received chunk
    produced: int = 0  # chunks in the outputs of the completed tasks (what the worker sent)
    received: int = 0  # distinct chunks that reached this caller as MessageDelta events
    duplicates: int = 0  # a chunk received more than once
    gaps: int = 0  # events the caller's subscription reported lost (ObservationGap)
    tally: Tally = field(default_factory=Tally)
    cpu: CpuWindow = field(default_factory=CpuWindow)

    @property
    def expected(self) -> int:
        return self.tasks * self.chunks_per_task

    @property
    def lost(self) -> int:
        return max(0, self.expected - self.received)

    def failures(self) -> list[str]:
        found = []
        if not self.tally.clean:
            found.append(f"tasks: {self.tally.describe()}; {self.tally.first_problem}")
        if self.lost:
            found.append(f"{self.lost} of {self.expected} chunks never reached the caller")
        if self.duplicates:
            found.append(f"{self.duplicates} chunks reached the caller twice")
        if self.gaps:
            found.append(f"{self.gaps} events lost in the caller's subscription")
        return found


@dataclass
class CancelLatencyResult:
    """(e): request_cancellation() -> the terminal outcome, per running task."""

    label: str
    latencies: list[float] = field(default_factory=list)  # to the outcome
    requests: list[float] = field(default_factory=list)  # until request_cancellation returned
    tally: Tally = field(default_factory=Tally)
    cpu: CpuWindow = field(default_factory=CpuWindow)

    def failures(self) -> list[str]:
        if self.tally.clean:
            return []
        return [f"tasks: {self.tally.describe()}; {self.tally.first_problem}"]


async def clock_sample(session: AgentSession, result: EventLatencyResult) -> None:
    """One clock task: the latency of each chunk as it reaches this caller's ``events()``."""
    chunks = result.chunks_per_task
    seen: set[int] = set()
    try:
        task = await session.start_task(TaskRequest(TextInput("stream the clock")))
        events = task.events()  # subscribed before any await: no event can slip past
        async with asyncio.timeout(TASK_TIMEOUT):
            async for event in events:
                received = time.time_ns()
                if isinstance(event, MessageDelta):
                    for index, stamp in stamps(event.text):
                        if index in seen:
                            result.duplicates += 1
                            continue
                        seen.add(index)
                        result.latencies.append((received - stamp) / 1e9)
                elif isinstance(event, ObservationGap):
                    result.gaps += event.dropped_events
            outcome = await task.await_outcome()
    except Exception as error:
        result.tally.error(error)
        return
    finally:
        result.received += len(seen)
    if not isinstance(outcome, Completed):
        result.tally.record(type(outcome).__name__, outcome)
        return
    output = outcome.output.text if isinstance(outcome.output, TextOutput) else ""
    produced = [index for index, _ in stamps(output)]
    result.produced += len(produced)
    if produced != list(range(chunks)):
        result.tally.record(f"Completed(not {chunks} chunks in order)", output[:200])
    else:
        result.tally.record("ok", outcome)


async def first_of(
    events: AsyncIterator[TaskEvent], kind: tuple[type[TaskEvent], ...]
) -> TaskEvent | None:
    """The first event of type ``kind``; the subscription is closed then."""
    try:
        async for event in events:
            if isinstance(event, kind):
                return event
        return None
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


async def cancel_sample(session: AgentSession, result: CancelLatencyResult) -> None:
    """Start a slow task, wait for its first chunk (it runs in the worker), cancel it and
    time the way to its terminal outcome, which must be ``Cancelled``."""
    try:
        task: AgentTask = await session.start_task(TaskRequest(TextInput("stream slowly")))
        async with asyncio.timeout(TASK_TIMEOUT):
            first = await first_of(task.events(), (MessageDelta, TerminalEvent))
            if not isinstance(first, MessageDelta):
                outcome = await task.await_outcome()
                result.tally.record(f"{type(outcome).__name__}(before its first chunk)", outcome)
                return
            started = time.perf_counter()
            await task.request_cancellation()
            requested = time.perf_counter()
            outcome = await task.await_outcome()
            ended = time.perf_counter()
    except Exception as error:
        result.tally.error(error)
        return
    if isinstance(outcome, Cancelled):
        result.latencies.append(ended - started)
        result.requests.append(requested - started)
        result.tally.record("ok", outcome)
    else:
        result.tally.record(type(outcome).__name__, outcome)


R = TypeVar("R", EventLatencyResult, CancelLatencyResult)


async def fresh_session_samples(
    harness: AgentHarness,
    count: int,
    sample: Callable[[AgentSession, R], Awaitable[None]],
    result: R,
) -> None:
    """``count`` samples, each in a fresh session released outside what it times."""
    for _ in range(count):
        try:
            session = await harness.create_session(CLOCK_SPEC)
        except Exception as error:
            result.tally.error(error)
            continue
        try:
            await sample(session, result)
        finally:
            await release(session, result.tally)


async def clock_scenario(
    bench: Bench,
    profile: str,
    sample: Callable[[AgentSession, R], Awaitable[None]],
    warm: R,
    result: R,
    count: int,
) -> R:
    """One worker process of a clock profile: warm up (a failure aborts the scenario),
    then ``count`` samples inside a CPU window."""
    settings = bench.new_settings(profile, CLOCK_PROFILES)
    pool = await bench.ours_workers(settings, 1)
    try:
        async with bench.ours(settings) as harness:
            await fresh_session_samples(harness, 2, sample, warm)
            if warm.failures():
                raise RuntimeError(f"{profile} warm-up failed: {'; '.join(warm.failures())}")
            with bench.meter.window() as cpu:
                await fresh_session_samples(harness, count, sample, result)
            result.cpu = cpu
        pool.check_alive()
    finally:
        await bench.stop_pool(pool)
    return result


async def scenario_event_latency(bench: Bench) -> EventLatencyResult:
    plan = bench.plan
    return await clock_scenario(
        bench,
        clock_profiles.CLOCK.name,
        clock_sample,
        EventLatencyResult("warm-up", 2, clock_profiles.EVENT_CHUNKS),
        EventLatencyResult(
            "ours: CeleryHarness, 1 worker process (prefork -c 1)",
            plan.event_tasks,
            clock_profiles.EVENT_CHUNKS,
        ),
        plan.event_tasks,
    )


async def scenario_cancel_latency(bench: Bench) -> CancelLatencyResult:
    plan = bench.plan
    return await clock_scenario(
        bench,
        clock_profiles.CLOCK_SLOW.name,
        cancel_sample,
        CancelLatencyResult("warm-up"),
        CancelLatencyResult("ours: CeleryHarness, 1 worker process (prefork -c 1)"),
        plan.cancel_samples,
    )


# -- report -----------------------------------------------------------------------------


def print_latency(results: list[LatencyResult], cpu: CpuWindow, plan: Plan) -> None:
    print(
        f"\n(a) fresh-session task latency: create session + 1 task to outcome "
        f"(n={plan.latency_samples} per system, interleaved; release untimed), ms"
    )
    print(f"  {'system':<56} {'median':>8} {'p95':>8} {'mean':>8} {'min':>8} {'max':>8}  outcomes")
    for result in results:
        values = result.samples or [float("nan")]
        print(
            f"  {result.label:<56} {ms(statistics.median(values))} {ms(percentile(values, 0.95))} "
            f"{ms(statistics.fmean(values))} {ms(min(values))} {ms(max(values))}  "
            f"{result.tally.describe()}"
        )
    ours, reference, noop = results
    if ours.samples and reference.samples:
        print(
            f"  ratio ours/reference: median "
            f"{ratio(statistics.median(ours.samples), statistics.median(reference.samples)):.2f}, "
            f"p95 {ratio(percentile(ours.samples, 0.95), percentile(reference.samples, 0.95)):.2f}"
        )
    if ours.samples and noop.samples:
        print(
            f"  ours - raw Celery no-op (median): "
            f"{(statistics.median(ours.samples) - statistics.median(noop.samples)) * 1000:.2f} ms"
        )
    print(f"  {cpu.describe()} (whole interleaved measurement, {cpu.wall:.1f} s)")


def print_long_session(results: list[LongSessionResult], plan: Plan) -> None:
    window = plan.window
    print(
        f"\n(b) one session, {plan.turns} sequential tasks: median latency over windows of "
        f"{window} tasks, ms"
    )
    starts = sorted({0, *(round(i * (plan.turns - window) / 4) for i in range(1, 5))})
    header = "".join(f"{f'{s + 1}-{s + window}':>10}" for s in starts)
    print(f"  {'system':<56}{header}   last/first  outcomes")
    for result in results:
        cells = "".join(f"{result.window_median(s) * 1000:10.2f}" for s in starts)
        print(
            f"  {result.label:<56}{cells}   {ratio(result.last, result.first):9.2f}x  "
            f"{result.tally.describe()}"
        )
    for result in results:
        print(f"  {result.label.split(':')[0]}: {result.cpu.describe()} ({result.cpu.wall:.1f} s)")


def print_throughput(results: list[ThroughputResult], plan: Plan) -> None:
    print(
        f"\n(c) throughput: {plan.sessions} concurrent sessions x {plan.tasks_per_session} "
        f"sequential tasks = {plan.sessions * plan.tasks_per_session} tasks"
    )
    print(
        f"  {'system':<40} {'workers':<24} {'seconds':>8} {'tasks/s':>8} {'cpu ms/task':>12} "
        f"{'other cpu':>10}  outcomes"
    )
    for result in results:
        print(
            f"  {result.label:<40} {result.workers:<24} {result.seconds:8.2f} "
            f"{result.per_second:8.1f} {result.cpu_ms_per_task:12.1f} "
            f"{result.cpu.other:9.1f}s  {result.tally.describe()}"
        )
    print(
        "  (cpu ms/task: CPU of this run's processes -- bench/caller, workers with their pool "
        "children, embedded Redis -- per completed task;\n   other cpu: CPU used by "
        "processes outside this run during the window)"
    )
    reference = results[0]
    for result in results[1:]:
        print(
            f"  ratio {result.label} ({result.workers}) / reference: "
            f"{ratio(result.per_second, reference.per_second):.2f}"
        )
    print_cpu_parts(results)


def print_cpu_parts(results: list[ThroughputResult]) -> None:
    print("  ours, cpu ms per completed task by process (the 'cpu ms/task' column split up):")
    header = "".join(f"{part:>15}" for part in CPU_PARTS)
    print(f"  {'system':<40} {'workers':<24}{header}")
    for result in results:
        if not result.label.startswith("ours"):
            continue
        cells = "".join(
            f"{result.cpu.parts.get(part, float('nan')) / result.tally.ok * 1000:15.2f}"
            if result.tally.ok
            else f"{'n/a':>15}"
            for part in CPU_PARTS
        )
        print(f"  {result.label:<40} {result.workers:<24}{cells}")
    print(
        "  (caller: this process; worker main: the celery worker main processes; pool "
        "children: their prefork children;\n   redis: the embedded server, 0 with "
        "--redis-url; a process that exits inside the window takes its CPU with it)"
    )


def latency_row(label: str, values: Sequence[float]) -> str:
    values = list(values) or [float("nan")]
    return (
        f"  {label:<56} {ms(percentile(values, 0.5))} {ms(percentile(values, 0.95))} "
        f"{ms(max(values))} {ms(min(values))} {ms(statistics.fmean(values))}"
    )


def print_event_latency(result: EventLatencyResult) -> None:
    print(
        f"\n(d) event latency, worker -> caller: {result.tasks} tasks x "
        f"{result.chunks_per_task} streamed chunks {clock_profiles.EVENT_INTERVAL * 1000:g} ms "
        f"apart, one task at a time, ms"
    )
    print(f"  {'per chunk':<56} {'p50':>8} {'p95':>8} {'max':>8} {'min':>8} {'mean':>8}")
    print(latency_row(result.label, result.latencies))
    print(
        f"  chunks: sent {result.expected} (in the completed outputs: {result.produced}), "
        f"received {result.received}, lost {result.lost}, received twice {result.duplicates}, "
        f"subscription gaps {result.gaps}; tasks {result.tally.describe()}"
    )
    print(
        "  clock: the worker stamps time.time_ns() (CLOCK_REALTIME) into each chunk as the "
        "model yields it; the caller\n  reads time.time_ns() when the MessageDelta comes "
        "out of task.events(). Both processes run on this machine\n  and share "
        "CLOCK_REALTIME: no clock skew is involved."
    )
    print(f"  {result.cpu.describe()} ({result.cpu.wall:.1f} s)")


async def scenario_floors(bench: Bench) -> Floors:
    plan = bench.plan
    graphs = await measure_floors(
        bench.redis_url,
        SPEC.instructions or "",
        plan.sessions,
        plan.tasks_per_session,
        lambda pids: sum(_proc_cpu(pid) for pid in pids),
        bench.redis_pid,
    )
    return Floors(graphs, await event_transport_floor(bench.redis_url))


def print_floors(floors: Floors, plan: Plan) -> None:
    results, transport = floors.graphs, floors.transport
    print(
        f"\n(f) floors: the same graph turn bare in this process (create_agent, scripted "
        f"model, no middleware),\n    {plan.sessions} concurrent sessions x "
        f"{plan.tasks_per_session} turns; CPU of this process and the embedded Redis"
    )
    print(f"  {'graph':<48} {'tasks/s':>8} {'cpu ms/task':>12}  outcomes")
    for result in results:
        print(
            f"  {result.label:<48} {result.per_second:8.1f} {result.cpu_ms_per_task:12.1f}  "
            f"{result.ok}/{result.tasks} answered"
        )
    print(
        "  (what any harness running this turn on this saver spends at least per task, before "
        "its own work;\n   compare scenario (c)'s CPU per task and its raw Celery no-op)"
    )
    print(
        f"  event transport alone (stamped XADD in another Python process -> XREAD BLOCK here, "
        f"every 5 ms):\n    p50 {ms(transport.p50)} ms, p95 {ms(transport.percentile(0.95))} ms, "
        f"{len(transport.latencies)}/{transport.sent} entries read; compare scenario (d)"
    )


def print_cancel_latency(result: CancelLatencyResult, plan: Plan) -> None:
    print(
        f"\n(e) cancel latency: a running task (its first chunk received; the model streams a "
        f"chunk every {clock_profiles.SLOW_INTERVAL * 1000:g} ms\n    for up to "
        f"{clock_profiles.SLOW_CHUNKS * clock_profiles.SLOW_INTERVAL:g} s), "
        f"request_cancellation() -> terminal outcome (n={plan.cancel_samples}), ms"
    )
    print(f"  {'':<56} {'p50':>8} {'p95':>8} {'max':>8} {'min':>8} {'mean':>8}")
    print(latency_row("to the Cancelled outcome", result.latencies))
    print(latency_row("  of which: until request_cancellation() returned", result.requests))
    print(f"  outcomes (must be Cancelled): {result.tally.describe()}")
    print(f"  {result.cpu.describe()} ({result.cpu.wall:.1f} s)")


@dataclass
class Results:
    """What the run measured; ``None`` for a scenario that was aborted (or not run)."""

    latency: tuple[list[LatencyResult], CpuWindow] | None = None
    long: list[LongSessionResult] | None = None
    throughput: list[ThroughputResult] | None = None
    events: EventLatencyResult | None = None
    cancel: CancelLatencyResult | None = None
    floors: Floors | None = None
    aborted: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Target:
    label: str
    measured: float | None  # None: not measured (its scenario aborted or was left out)
    unit: str
    met: bool
    clean: bool  # its scenario had no failure

    @property
    def verdict(self) -> str:
        if self.measured is None:
            return "NOT MEASURED (scenario aborted, or left out by --only)"
        verdict = "met" if self.met and self.clean else "NOT MET"
        if not self.clean:
            verdict += " (failures in this scenario: result invalid)"
        return verdict

    @property
    def ok(self) -> bool:
        return self.measured is not None and self.met and self.clean


def not_measured(label: str, unit: str) -> Target:
    return Target(label, None, unit, met=False, clean=False)


def targets(results: Results, plan: Plan) -> list[Target]:
    rows: list[Target] = []
    label = "(a) fresh-session latency, median ours/reference <= 1.3"
    if results.latency is None:
        rows.append(not_measured(label, "x"))
    else:
        ours_a, ref_a, _ = results.latency[0]
        value = ratio(
            statistics.median(ours_a.samples or [float("nan")]),
            statistics.median(ref_a.samples or [float("nan")]),
        )
        rows.append(
            Target(label, value, "x", value <= 1.3, ours_a.tally.clean and ref_a.tally.clean)
        )
    label = (
        f"(b) ours task {plan.turns - plan.window + 1}-{plan.turns} / task 1-{plan.window}"
        f" latency <= 2x"
    )
    if results.long is None:
        rows.append(not_measured(label, "x"))
    else:
        ours_b = results.long[0]
        value = ratio(ours_b.last, ours_b.first)
        rows.append(Target(label, value, "x", value <= 2.0, ours_b.tally.clean))
    label = "(c) throughput ours (2 workers) / reference >= 2x"
    label_cpu = "(c) CPU per task, ours (2 workers), all processes <= 10 ms"
    if results.throughput is None:
        rows += [not_measured(label, "x"), not_measured(label_cpu, "ms")]
    else:
        reference_c = results.throughput[0]
        ours_two = [
            r
            for r in results.throughput
            if r.label.startswith("ours") and r.workers.startswith("2")
        ]
        if ours_two:
            two = ours_two[0]
            value = ratio(two.per_second, reference_c.per_second)
            clean = two.tally.clean and reference_c.tally.clean
            rows.append(Target(label, value, "x", value >= 2.0, clean))
            value = two.cpu_ms_per_task
            rows.append(Target(label_cpu, value, "ms", value <= 10.0, two.tally.clean))
    label = "(d) event latency worker -> caller, p50 <= 1 ms"
    if results.events is None:
        rows.append(not_measured(label, "ms"))
    else:
        value = percentile(results.events.latencies, 0.5) * 1000
        rows.append(Target(label, value, "ms", value <= 1.0, not results.events.failures()))
    label = "(e) cancel -> Cancelled outcome, p50 <= 10 ms"
    label_95 = "(e) cancel -> Cancelled outcome, p95 <= 20 ms"
    if results.cancel is None:
        rows += [not_measured(label, "ms"), not_measured(label_95, "ms")]
    else:
        clean = not results.cancel.failures()
        value = percentile(results.cancel.latencies, 0.5) * 1000
        rows.append(Target(label, value, "ms", value <= 10.0, clean))
        value = percentile(results.cancel.latencies, 0.95) * 1000
        rows.append(Target(label_95, value, "ms", value <= 20.0, clean))
    return rows


def tallies(results: Results) -> list[tuple[str, Tally]]:
    """Every measured task's tally, by scenario and system."""
    found: list[tuple[str, Tally]] = []
    if results.latency is not None:
        found += [(f"(a) {r.label}", r.tally) for r in results.latency[0]]
    if results.long is not None:
        found += [(f"(b) {r.label}", r.tally) for r in results.long]
    if results.throughput is not None:
        found += [(f"(c) {r.label} ({r.workers})", r.tally) for r in results.throughput]
    if results.events is not None:
        found.append((f"(d) {results.events.label}", results.events.tally))
    if results.cancel is not None:
        found.append((f"(e) {results.cancel.label}", results.cancel.tally))
    return found


def failures(results: Results) -> list[str]:
    """Everything that went wrong in the run, by scenario: an aborted scenario (a worker
    died, a warm-up failed), a task that did not end as expected, a session release that
    failed, a chunk lost or received twice, a cancel that did not end Cancelled."""
    found = list(results.aborted)
    for label, tally in tallies(results):
        if label.startswith(("(d)", "(e)")):
            continue  # their own checks below say more
        if not tally.clean:
            found.append(f"{label}: {tally.describe()}; {tally.first_problem}")
    if results.events is not None:
        found += [f"(d) {problem}" for problem in results.events.failures()]
    if results.cancel is not None:
        found += [f"(e) {problem}" for problem in results.cancel.failures()]
    if results.floors is not None:
        found += [f"(f) {problem}" for problem in results.floors.failures()]
    for label, tally in tallies(results):
        if tally.cleanup_errors:
            found.append(f"{label}: {tally.cleanup_errors} session releases failed")
    return found


def exit_code(found: Sequence[str], rows: Sequence[Target], require_targets: bool) -> int:
    """1 if anything failed; else 2 if targets are required and one is not met; else 0."""
    if found:
        return 1
    if require_targets and not all(row.ok for row in rows):
        return 2
    return 0


def print_targets(rows: Sequence[Target], found: Sequence[str], results: Results) -> None:
    print("\ntargets")
    for row in rows:
        measured = "    n/a" if row.measured is None else f"{row.measured:7.2f}"
        print(f"  {row.label:<64} measured {measured} {row.unit:<2}  {row.verdict}")
    counted = [tally for _, tally in tallies(results)]
    total = sum(tally.total for tally in counted)
    ok = sum(tally.ok for tally in counted)
    print(
        f"  all measured tasks completed as expected: {'yes' if ok == total else 'NO'} "
        f"({ok}/{total})"
    )
    print(f"  failures in this run: {len(found) or 'none'}")
    for problem in found[:10]:
        print(f"    {problem[:400]}")
    if len(found) > 10:
        print(f"    ... and {len(found) - 10} more")


T = TypeVar("T")


async def attempt(
    label: str, scenario: Callable[[], Awaitable[T]], results: Results, started: float
) -> T | None:
    """Run one scenario; one that raises (a worker died, a warm-up failed) is recorded as
    aborted, and the run goes on with the next."""
    print(f"[{time.perf_counter() - started:6.1f}s] {label} ...", flush=True)
    try:
        return await scenario()
    except Exception as error:
        traceback.print_exc()
        results.aborted.append(f"{label}: aborted: {type(error).__name__}: {error}"[:400])
        print(f"  {label} aborted: {type(error).__name__}: {error}", flush=True)
        return None


async def run(
    redis_url: str,
    plan: Plan,
    log_dir: Path,
    redis_pid: int | None,
    require_targets: bool,
    only: frozenset[str] = SCENARIOS,
) -> int:
    """The scenarios ``only`` names, in turn; the report; the exit code (see
    ``exit_code``). A scenario left out is reported as not measured."""
    bench = Bench(redis_url, plan, log_dir, redis_pid)
    helper = (
        "tooling.worker_process.WorkerProcess" if bench.use_project_helper else "bench WorkerPool"
    )
    print(
        f"workers: {helper}"
        f" for ours, bench WorkerPool for the no-op (both: python -m celery ... worker "
        f"-P prefork -c 1 --loglevel warning, one OS process each)"
    )
    started = time.perf_counter()
    results = Results()
    scenarios: dict[str, tuple[str, Callable[[], Awaitable[Any]]]] = {
        "a": ("(a) fresh-session latency", lambda: scenario_latency(bench)),
        "b": ("(b) long session", lambda: scenario_long_session(bench)),
        "c": ("(c) throughput", lambda: scenario_throughput(bench)),
        "d": ("(d) event latency", lambda: scenario_event_latency(bench)),
        "e": ("(e) cancel latency", lambda: scenario_cancel_latency(bench)),
        "f": ("(f) floors", lambda: scenario_floors(bench)),
    }
    fields = {
        "a": "latency",
        "b": "long",
        "c": "throughput",
        "d": "events",
        "e": "cancel",
        "f": "floors",
    }
    try:
        for name, (label, scenario) in scenarios.items():
            if name in only:
                setattr(results, fields[name], await attempt(label, scenario, results, started))
    finally:
        await asyncio.to_thread(bench.stop_all)
    if results.latency is not None:
        print_latency(*results.latency, plan)
    if results.long is not None:
        print_long_session(results.long, plan)
    if results.throughput is not None:
        print_throughput(results.throughput, plan)
    if results.events is not None:
        print_event_latency(results.events)
    if results.cancel is not None:
        print_cancel_latency(results.cancel, plan)
    if results.floors is not None:
        print_floors(results.floors, plan)
    rows = targets(results, plan)
    found = failures(results)
    print_targets(rows, found, results)
    code = exit_code(found, rows, require_targets)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"\nwall time of the run: {time.perf_counter() - started:.1f} s; load average now "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; worker logs: {log_dir}"
    )
    reason = {
        0: "no failures" + ("; every target met" if require_targets else ""),
        1: "failures in this run",
        2: "targets not met (--require-targets)",
    }[code]
    print(f"exit code {code}: {reason}")
    return code


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer samples, 10x20 tasks for (c), 50 turns for (b), 10 tasks for (d) and (e)",
    )
    parser.add_argument(
        "--redis-url", help="use this Redis 8 (search+JSON) instead of an embedded one"
    )
    parser.add_argument(
        "--worker-counts",
        default="1,2",
        help="worker processes for (c), comma separated (default 1,2)",
    )
    parser.add_argument("--log-dir", type=Path, help="where worker logs go (default: temp dir)")
    parser.add_argument(
        "--only",
        default=",".join(sorted(SCENARIOS)),
        help="the scenarios to run, comma separated letters (default a,b,c,d,e,f); the "
        "targets of the others are reported as not measured",
    )
    parser.add_argument(
        "--require-targets",
        action="store_true",
        help="exit 2 when a target is not met (without it only failures change the exit code)",
    )
    parser.add_argument("--results-page", type=Path, default=RESULTS_PAGE)
    parser.add_argument("--no-results-page", action="store_true")
    args = parser.parse_args(argv)
    args.parser = parser
    return args


def measure(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    only = frozenset(part.strip() for part in args.only.split(",") if part.strip())
    if not only or not only <= SCENARIOS:
        parser.error(f"--only takes letters among {','.join(sorted(SCENARIOS))}")
    plan = QUICK if args.quick else FULL
    counts = tuple(int(part) for part in args.worker_counts.split(",") if part.strip())
    plan = Plan(**{**plan.__dict__, "worker_counts": counts})
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="bench-workers-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"mode: {plan.mode}; python {platform.python_version()}; celery {celery.__version__}; "
        f"cpus: {os.cpu_count()}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(f"code: {git_state()}")
    print(
        f"model: {SCRIPTED.model.target} (both harnesses) for (a)-(c), prompts 'question <n>'; "
        f"{clock_profiles.MODEL} in the workers for (d) and (e)"
    )
    if args.redis_url:
        print(f"redis: {args.redis_url} (external)")
        return asyncio.run(run(args.redis_url, plan, log_dir, None, args.require_targets, only))
    with EmbeddedRedis() as server:
        print(f"redis: embedded Redis 8 at {server.url}")
        return asyncio.run(run(server.url, plan, log_dir, server.pid, args.require_targets, only))


def main(argv: Sequence[str] | None = None) -> int:
    return main_into_section("latency_throughput.py", argv, parse, measure)


if __name__ == "__main__":
    sys.exit(main())
