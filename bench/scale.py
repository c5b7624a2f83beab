#!/usr/bin/env python
"""Many runs that mostly await a remote model: one worker node, one caller, one API.

    python bench/scale.py [--tasks 1000] [--runs-per-process 500] [--prefork-tasks 40]
                          [--prefork-concurrency 8] [--sse-streams 500] [--model-seconds 3]
                          [--only a,b,d,e] [--profile] [--langgraph-dev PATH]

A quick run: ``--tasks 50 --prefork-tasks 8 --sse-streams 20 --model-seconds 1``.

One embedded Redis 8 (search + JSON). The model (``bench.scale_model:ScaleChatModel``,
profile ``scale`` of ``bench.scale_profiles:PROFILES``) awaits ``--model-seconds`` while it
streams 30 pieces, evenly spaced (``asyncio.sleep``, no CPU), with usage on the last one;
each piece carries the wall clock ``time.time_ns()`` of the process that runs the model,
which the caller subtracts at receipt (event latency: every process here shares the
machine's CLOCK_REALTIME). The model counts its calls in Redis where it runs (in flight
now and at the peak, by process; calls by task), under ``bench:scale:<namespace>:``.

Scenarios, all in one run:
 (a) runs on one loop: a worker node of ``--processes`` (2) ``celery worker`` OS processes,
     each ``-P threads -c R`` (``--runs-per-process``, 500), started by
     ``tooling.worker_process.WorkerProcess``; ``--tasks`` (1,000) tasks in as many
     sessions (created ahead, untimed), all started at once by one ``CeleryHarness`` in
     this process, each followed through ``task.events()``. Reported: wall time from the
     first start to the last outcome, peak runs in flight per process (exact, from the
     model's counters), RSS per in-flight run above the idle process (VmRSS after the
     warm-up, idle, and at the sampled peak), CPU per task over every process (caller,
     workers with their children, redis-server), tasks not completed, chunks lost,
     received twice or out of order, duplicate model calls (a task called more than
     once: a lost lease or a redelivery; with the task records' deliveries and sweeper
     recoveries), event latency p50/p95/p99/max over every chunk.
 (b) today's prefork layout: ``--prefork-processes`` (1) process(es) ``-P prefork -c
     --prefork-concurrency`` (8), ``--prefork-tasks`` (40) tasks the same way: wall time,
     throughput, peak in flight, RSS per in-flight run of the whole tree (main + pool
     children). The ratio of (a)'s throughput to (b)'s is printed; nothing is
     extrapolated: each figure is what ran.
 (c) the caller following many tasks (measured during (a)): the Redis connections this
     process holds (``CLIENT LIST`` entries matched to its own sockets' ports) at the
     peak in flight and at most, and (a)'s event latency.
 (d) ``--sse-streams`` (500) Server-Sent Event streams through one ``ahp-celery api``
     process, all at once (``POST /v1/tasks/stream``, a run each, aiohttp in this
     process), on (a)'s worker node: the API process's Redis connections and the event
     latency over SSE.
 (e) the floor: the in-process reference ``LangGraphHarness`` (agent-harness-protocol-
     langgraph) on an ``AsyncRedisSaver`` of the same Redis, the same model in this
     process, the same ``--tasks`` tasks: wall time, CPU per task, event latency, and the
     ratios of (a) to it.
 (f) LangGraph's own server, with ``--langgraph-dev`` naming the ``langgraph`` executable
     of a separate venv (``python -m venv /tmp/lgdev-venv && /tmp/lgdev-venv/bin/pip
     install 'langgraph-cli[inmem]'``; never this project's venv): ``langgraph dev`` (its
     in-memory runtime, offline, ``--n-jobs-per-worker`` = ``--tasks``) serves the
     reference's graph with the same stamped model and no Redis
     (``bench/scale_langgraph_graph.py``), ``--tasks`` stateless runs at once over
     ``POST /runs/stream``: wall time, CPU per run, server RSS, event latency. Its
     failures are reported, not counted in the exit code. Without the flag: "not
     measured" with the reason.

What the figures include: the model's bookkeeping (two short scripts per call) and the
sampler's reads (an ``HGETALL`` every 0.2 s, ``CLIENT LIST`` at new highs and every 2 s,
``/proc``) are in the CPU figures; the bench's own connections (the sampler's, the
counters', the model's, the worker readiness probe's) are left out of the connection
counts by their client names. The reference (e) publishes no deltas: the model's answer
reaches its caller as one ``MessageCompleted`` after the graph step and its checkpoint
write, so its latency is the last chunk's, one per task.
The CPU that processes outside the run used meanwhile is printed under each window, with
a warning from a tenth of the machine on: such figures are distorted.

``--profile`` samples where each process's CPU goes during (a): ``py-spy record --gil
--nonblocking`` of the caller and of every worker process (the thread holding the GIL;
top 15 functions by self time each); without py-spy, cProfile of the caller only (said
so in the output). py-spy perturbs what it samples: profile apart from the figures.

The report is printed and written to the results page (``docs/benchmarks.md``, section
``bench/scale.py``, replacing only that section; ``--results-page`` / ``--no-results-page``).

Exit code 1 when any task did not complete, any chunk was lost, received twice or out of
order, or a scenario aborted (a worker died); missed targets only print as missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import httpx  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402
from agent_harness_protocol import (  # noqa: E402
    AgentHarness,
    AgentSession,
    Completed,
    ContextRetentionDisposition,
    MessageCompleted,
    MessageDelta,
    ObservationGap,
    SessionSpec,
    TaskRequest,
    TextInput,
    TextOutput,
    UserHistoryVisibility,
)
from agent_harness_protocol_langgraph import (  # noqa: E402
    CancellationSemantics as ReferenceCancellation,
)
from agent_harness_protocol_langgraph import LangGraphHarness  # noqa: E402
from langgraph.checkpoint.redis.aio import AsyncRedisSaver  # noqa: E402

from bench import scale_profiles  # noqa: E402
from bench.http_vs_harness import ApiServer  # noqa: E402
from bench.results_page import RESULTS_PAGE, git_state, machine, section_body  # noqa: E402
from bench.scale_model import ALL, CLIENT_NAME, ScaleChatModel, bench_keys, stamps  # noqa: E402
from bench.scale_probes import (  # noqa: E402
    ProcessProfile,
    Profiler,
    cpu,
    memory,
    redis_clients_of,
    rss,
    tree,
    tree_cpu,
)
from bench.scale_report import SECTION, Report, report, write_section  # noqa: E402
from bench.scale_results import (  # noqa: E402
    Calls,
    LangGraphDevResult,
    Peak,
    Plan,
    Results,
    RunResult,
    Samples,
    SseResult,
    Streams,
    cpu_window,
    wait_for_quiet,
)
from harness import CeleryHarness  # noqa: E402
from tooling.embedded_redis import EmbeddedRedis  # noqa: E402
from tooling.worker_process import (  # noqa: E402
    PROBE_CLIENT_NAME,
    Pool,
    WorkerProcess,
    child_environment,
)
from wire.keys import Keys  # noqa: E402
from wire.profiles import AgentProfile  # noqa: E402
from wire.records import TaskField  # noqa: E402
from wire.settings import Settings  # noqa: E402

SCENARIOS = frozenset("abde")
SPEC = SessionSpec(instructions="You are a benchmark assistant.", model=scale_profiles.MODEL_ID)
TENANT = "bench"
TOKEN = "bench-" + uuid4().hex
SAMPLE_SECONDS = 0.2
SAMPLER_NAME = "bench-scale-sampler"
COUNTERS_NAME = "bench-scale-counters"


# -- the processes under measurement --------------------------------------------------------


@dataclass
class Node:
    """The processes a scenario's model runs in: worker main processes (their pool
    children counted with them when ``whole_tree``), or this process for the reference."""

    pids: dict[str, int]  # label -> main pid
    whole_tree: bool
    slots: int = 1  # processes of each that run the model (prefork: its pool children)

    def memory(self) -> dict[str, int]:
        return {label: memory(pid, whole_tree=self.whole_tree) for label, pid in self.pids.items()}

    def members(self, label: str) -> set[int]:
        pid = self.pids[label]
        return set(tree(pid)) if self.whole_tree else {pid}


class Sampler:
    """Every ``SAMPLE_SECONDS``: the model's in-flight counters (one ``HGETALL``) and the
    RSS of each node process; at a new high of the runs in flight (at most every 0.5 s)
    and every 2 s, the Redis connections of the processes named in ``connections_of``."""

    def __init__(
        self,
        redis_url: str,
        namespace: str,
        node: Node,
        connections_of: Mapping[str, int],
        samples: Samples,
    ) -> None:
        self.client = aioredis.Redis.from_url(
            redis_url, decode_responses=True, client_name=SAMPLER_NAME
        )
        self.redis_port = urlsplit(redis_url).port or 6379
        self.inflight_key = bench_keys(namespace)[0]
        self.node = node
        self.connections_of = dict(connections_of)
        self.samples = samples
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Sampler:
        self.samples.peaks = {label: Peak() for label in self.node.pids}
        self.samples.connections_max = dict.fromkeys(self.connections_of, 0)
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.client.aclose()

    async def _run(self) -> None:
        started = time.perf_counter()
        best, last_connections, last_high = 0, float("-inf"), float("-inf")
        # The node's processes, once (prefork children are forked before the warm-up):
        # walking a threads worker's 500 threads every sample would cost the caller CPU.
        members = {label: self.node.members(label) for label in self.node.pids}
        while True:
            now = time.perf_counter()
            counts = {
                int(pid): int(n)
                for pid, n in (await self.client.hgetall(self.inflight_key)).items()
                if pid != ALL
            }
            total = sum(counts.values())
            for label, peak in self.samples.peaks.items():
                mine = sum(n for pid, n in counts.items() if pid in members[label])
                if mine > peak.inflight:
                    peak.inflight = mine
                    peak.rss = sum(rss(pid) for pid in members[label])
                    peak.at = now - started
            high = total > best and now - last_high >= 0.5
            if self.connections_of and (high or now - last_connections >= 2.0):
                found = await redis_clients_of(
                    self.client,
                    self.connections_of,
                    self.redis_port,
                    exclude=(SAMPLER_NAME, COUNTERS_NAME, CLIENT_NAME, PROBE_CLIENT_NAME),
                )
                for label, n in found.items():
                    self.samples.connections_max[label] = max(
                        n, self.samples.connections_max[label]
                    )
                if total > best:  # a new high of runs in flight (never an idle sample)
                    best, last_high = total, now
                    self.samples.connections_at_peak = found
                    self.samples.total_at_peak = total
                last_connections = now
            await asyncio.sleep(SAMPLE_SECONDS)


# -- driving tasks --------------------------------------------------------------------------


@dataclass
class Clock:
    first_start: float = float("inf")
    last_outcome: float = 0.0

    @property
    def wall(self) -> float:
        return max(0.0, self.last_outcome - self.first_start)


async def open_sessions(harness: AgentHarness, count: int) -> list[AgentSession]:
    gate = asyncio.Semaphore(50)

    async def one() -> AgentSession:
        async with gate:
            return await harness.create_session(SPEC)

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def release_sessions(sessions: Sequence[AgentSession]) -> int:
    gate, errors = asyncio.Semaphore(50), 0

    async def one(session: AgentSession) -> None:
        nonlocal errors
        async with gate:
            try:
                await session.release()
            except Exception:
                errors += 1

    await asyncio.gather(*(one(session) for session in sessions))
    return errors


async def follow(
    session: AgentSession, number: int, streams: Streams, clock: Clock, within: float
) -> str:
    """Start one task, follow its events to the end, account for it; its task id."""
    indices: list[int] = []
    task_id = ""
    streams.started += 1
    clock.first_start = min(clock.first_start, time.perf_counter())
    try:
        task = await session.start_task(TaskRequest(TextInput(f"task {number}")))
        task_id = task.id.value
        events = task.events()  # subscribed before any await: nothing slips past
        async with asyncio.timeout(within):
            async for event in events:
                received = time.time_ns()
                if isinstance(event, MessageDelta):
                    for index, stamp in stamps(event.text):
                        indices.append(index)
                        streams.latencies.append((received - stamp) / 1e9)
                elif isinstance(event, MessageCompleted) and not indices:
                    # No deltas (the in-process reference streams none): the chunks come
                    # in the whole message; its latency is that of the last chunk.
                    pieces = stamps(event.text)
                    indices.extend(index for index, _ in pieces)
                    if pieces:
                        streams.latencies.append((received - pieces[-1][1]) / 1e9)
                        streams.whole_messages += 1
                elif isinstance(event, ObservationGap):
                    streams.gaps += event.dropped_events
            outcome = await task.await_outcome()
    except Exception as error:
        streams.account(indices, f"error:{type(error).__name__}", "", error)
        return task_id
    clock.last_outcome = max(clock.last_outcome, time.perf_counter())
    text = outcome.output if isinstance(outcome, Completed) else None
    output = text.text if isinstance(text, TextOutput) else ""
    streams.account(indices, type(outcome).__name__, output, outcome)
    return task_id


async def run_all(
    sessions: Sequence[AgentSession], streams: Streams, within: float
) -> tuple[Clock, list[str]]:
    clock = Clock()
    ids = await asyncio.gather(
        *(follow(session, n, streams, clock, within) for n, session in enumerate(sessions))
    )
    return clock, [task_id for task_id in ids if task_id]


async def warm_up(harness: AgentHarness, count: int, chunks: int, within: float) -> None:
    sessions = await open_sessions(harness, count)
    streams = Streams(chunks)
    try:
        await run_all(sessions, streams, within)
    finally:
        await release_sessions(sessions)
    if streams.not_completed:
        raise RuntimeError(f"warm-up failed: {'; '.join(streams.failures('warm-up'))}")


class Counters:
    """The model's bench-only counters of one namespace."""

    def __init__(self, redis_url: str, namespace: str) -> None:
        self.client = aioredis.Redis.from_url(
            redis_url, decode_responses=True, client_name=COUNTERS_NAME
        )
        self.keys = bench_keys(namespace)
        self.records = Keys(namespace)

    async def reset(self) -> None:
        await self.client.delete(*self.keys)

    async def peaks(self) -> tuple[dict[int, int], int]:
        raw = await self.client.hgetall(self.keys[1])
        by_pid = {int(pid): int(n) for pid, n in raw.items() if pid != ALL}
        return by_pid, int(raw.get(ALL, 0))

    async def calls(self, task_ids: Sequence[str], *, records: bool) -> Calls:
        counts = [int(n) for n in (await self.client.hgetall(self.keys[2])).values()]
        found = Calls(
            tasks_called=len(counts),
            calls=sum(counts),
            called_twice=sum(1 for n in counts if n > 1),
            extra=sum(n - 1 for n in counts if n > 1),
        )
        if records and task_ids:
            async with self.client.pipeline(transaction=False) as pipe:
                for task_id in task_ids:
                    pipe.hmget(
                        self.records.task(task_id), [TaskField.DELIVERIES, TaskField.RECOVERIES]
                    )
                rows = await pipe.execute()
            for deliveries, recoveries in rows:
                found.redelivered += int(deliveries or 0) > 1
                found.recoveries += int(recoveries or 0)
        return found

    async def aclose(self) -> None:
        await self.client.aclose()


async def wait_idle(counters: Counters, within: float = 30.0) -> None:
    """Until no model call runs (a warm-up's stragglers), then a second of quiet."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if int(await counters.client.hget(counters.keys[0], ALL) or 0) <= 0:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)


# -- the bench ------------------------------------------------------------------------------


class Bench:
    def __init__(self, redis_url: str, redis_pid: int | None, plan: Plan, log_dir: Path) -> None:
        self.redis_url = redis_url
        self.redis_pid = redis_pid
        self.plan = plan
        self.log_dir = log_dir

    def settings(self, tag: str) -> Settings:
        suffix = f"{tag}-{uuid4().hex[:8]}"
        return Settings(
            redis_url=self.redis_url,
            namespace=f"bench-scale-{suffix}",
            queue=f"bench.scale.{suffix}",
            profiles="bench.scale_profiles:PROFILES",
            profile=scale_profiles.NAME,
        )

    @property
    def profile(self) -> AgentProfile:
        return scale_profiles.scale_profile(self.plan.model_seconds, self.plan.chunks)

    async def wait_for_quiet(self, groups: Mapping[str, Callable[[], float]]) -> tuple[float, bool]:
        if self.plan.quiet_wait <= 0:
            return 0.0, True
        return await wait_for_quiet(groups, self.plan.quiet_wait, cores=os.cpu_count() or 1)

    def redis_cpu(self) -> float:
        return tree_cpu(self.redis_pid) if self.redis_pid is not None else 0.0

    async def start_workers(
        self, settings: Settings, tag: str, count: int, concurrency: int, pool: Pool
    ) -> list[WorkerProcess]:
        # The deployment's own settings for the layout, for code that reads them (the
        # ``-c`` option is what Celery runs either way).
        setting = "AHP_WORKER_RUNS" if pool == "threads" else "AHP_WORKER_CONCURRENCY"
        env = {**self.plan.model_env, setting: str(concurrency)}
        workers = [
            WorkerProcess(
                settings,
                concurrency=concurrency,
                pool=pool,
                extra_env=env,
                loglevel="warning",
                log_path=self.log_dir / f"{tag}-{index}.log",
                name=f"scale-{tag}-{index}",
            )
            for index in range(count)
        ]
        try:
            await asyncio.gather(
                *(asyncio.to_thread(w.start, timedelta(seconds=120)) for w in workers)
            )
        except BaseException:
            await stop_workers(workers)
            raise
        return workers

    async def warm_node(self, harness: AgentHarness, counters: Counters, node: Node) -> None:
        """Warm-up rounds (at most four) until ``node.slots`` processes of each node
        process ran a model call (imports, compiled graph, connections: every prefork
        child); then wait until the node is idle and forget the warm-up's counts."""
        count = max(self.plan.warm_up_per_process, node.slots) * len(node.pids)
        for _ in range(4):
            await warm_up(harness, count, self.plan.chunks, self.plan.task_timeout)
            ran = set((await counters.peaks())[0])
            if all(len(ran & node.members(label)) >= node.slots for label in node.pids):
                break
        await wait_idle(counters)
        await counters.reset()


async def stop_workers(workers: Sequence[WorkerProcess]) -> None:
    await asyncio.gather(*(asyncio.to_thread(worker.stop) for worker in workers))


def check_alive(workers: Sequence[WorkerProcess]) -> None:
    for worker in workers:
        if not worker.running:
            raise RuntimeError(
                f"worker {worker.hostname} exited with {worker.returncode}; "
                f"log {worker.log_path}:\n{worker.log_tail(10)}"
            )


def worker_pids(workers: Sequence[WorkerProcess]) -> dict[str, int]:
    return {
        f"worker-{index}": pid
        for index, worker in enumerate(workers)
        if (pid := worker.pid) is not None
    }


async def measure_node(
    bench: Bench,
    harness: AgentHarness,
    settings: Settings,
    node: Node,
    tasks: int,
    *,
    label: str,
    layout: str,
    cpu_groups: Mapping[str, Callable[[], float]],
    connections_of: Mapping[str, int],
    records: bool,
    profiler: Profiler | None = None,
) -> RunResult:
    """Warm the node, sample it idle, then ``tasks`` tasks at once in sessions created
    ahead; the window (CPU, samples, profile) spans the first start to the last outcome."""
    counters = Counters(bench.redis_url, settings.namespace)
    try:
        await bench.warm_node(harness, counters, node)
        samples = Samples(idle_rss=node.memory())
        sessions = await open_sessions(harness, tasks)
        streams = Streams(bench.plan.chunks)
        profiles: list[ProcessProfile] = []
        if profiler is not None:
            profiler.start()
            await asyncio.sleep(1.0)  # py-spy attached
        try:
            quiet = await bench.wait_for_quiet(cpu_groups)
            async with Sampler(bench.redis_url, settings.namespace, node, connections_of, samples):
                with cpu_window(cpu_groups) as window:
                    clock, task_ids = await run_all(sessions, streams, bench.plan.task_timeout)
        finally:
            if profiler is not None:
                profiles = await asyncio.to_thread(profiler.stop)
        window.wall = clock.wall  # first start to last outcome (the CPU window is wider)
        window.waited, window.quiet = quiet
        peak_by_pid, peak_all = await counters.peaks()
        calls = await counters.calls(task_ids, records=records)
        errors = await release_sessions(sessions)
    finally:
        await counters.aclose()
    return RunResult(
        label, layout, streams, window, samples, peak_by_pid, peak_all, calls, errors, profiles
    )


def tree_reading(pid: int) -> Callable[[], float]:
    return lambda: tree_cpu(pid)


def worker_cpu_groups(bench: Bench, node: Node) -> dict[str, Callable[[], float]]:
    groups: dict[str, Callable[[], float]] = {"caller": lambda: cpu(os.getpid())}
    groups.update({label: tree_reading(pid) for label, pid in node.pids.items()})
    groups["redis"] = bench.redis_cpu
    return groups


async def scenario_threads(bench: Bench) -> tuple[RunResult, list[WorkerProcess], Settings]:
    """(a) and (c): the workers stay up for (d)."""
    plan = bench.plan
    settings = bench.settings("threads")
    workers = await bench.start_workers(
        settings, "threads", plan.processes, plan.runs_per_process, "threads"
    )
    try:
        node = Node(worker_pids(workers), whole_tree=True)
        profiler = None
        if plan.profile:
            profiler = Profiler(
                {"caller": os.getpid(), **node.pids}, bench.log_dir, subprocesses=node.pids
            )
        async with CeleryHarness(settings, profile=bench.profile) as harness:
            result = await measure_node(
                bench,
                harness,
                settings,
                node,
                plan.tasks,
                label="ours: CeleryHarness, runs on one loop",
                layout=f"{plan.processes} proc x -P threads -c {plan.runs_per_process}",
                cpu_groups=worker_cpu_groups(bench, node),
                connections_of={"caller": os.getpid()},
                records=True,
                profiler=profiler,
            )
        check_alive(workers)
    except BaseException:
        await stop_workers(workers)
        raise
    return result, workers, settings


async def scenario_prefork(bench: Bench) -> RunResult:
    plan = bench.plan
    settings = bench.settings("prefork")
    workers = await bench.start_workers(
        settings, "prefork", plan.prefork_processes, plan.prefork_concurrency, "prefork"
    )
    try:
        node = Node(worker_pids(workers), whole_tree=True, slots=plan.prefork_concurrency)
        async with CeleryHarness(settings, profile=bench.profile) as harness:
            result = await measure_node(
                bench,
                harness,
                settings,
                node,
                plan.prefork_tasks,
                label="ours: CeleryHarness, today's prefork layout",
                layout=f"{plan.prefork_processes} proc x -P prefork -c {plan.prefork_concurrency}",
                cpu_groups=worker_cpu_groups(bench, node),
                connections_of={},
                records=True,
            )
        check_alive(workers)
    finally:
        await stop_workers(workers)
    return result


async def scenario_reference(bench: Bench) -> RunResult:
    """(e): the model runs in this process; its counters use a namespace of their own."""
    plan = bench.plan
    settings = bench.settings("reference")
    model = ScaleChatModel(
        seconds=plan.model_seconds,
        chunks=plan.chunks,
        redis_url=bench.redis_url,
        namespace=settings.namespace,
    )
    pool = aioredis.BlockingConnectionPool.from_url(
        bench.redis_url, max_connections=256, timeout=30, health_check_interval=30
    )
    client = aioredis.Redis(connection_pool=pool)
    node = Node({"caller": os.getpid()}, whole_tree=False)
    groups: dict[str, Callable[[], float]] = {
        "caller": lambda: cpu(os.getpid()),
        "redis": bench.redis_cpu,
    }
    try:
        async with AsyncRedisSaver(redis_client=client) as saver:
            await saver.asetup()
            harness = LangGraphHarness(
                model,
                model_id=scale_profiles.MODEL_ID,
                checkpointer=saver,
                cancellation_semantics=(
                    ReferenceCancellation.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED
                ),
                context_retention=ContextRetentionDisposition.MATERIALIZED,
                history_visibility=UserHistoryVisibility.HIDDEN,
            )
            try:
                return await measure_node(
                    bench,
                    harness,
                    settings,
                    node,
                    plan.tasks,
                    label="floor: LangGraphHarness in-process",
                    layout="1 process, 1 event loop",
                    cpu_groups=groups,
                    connections_of={"caller": os.getpid()},
                    records=False,
                )
            finally:
                await harness.aclose()
    finally:
        await model.aclose()
        await client.aclose()
        await pool.disconnect()


# -- (d) SSE through the API ----------------------------------------------------------------

TERMINAL_EVENTS = {"task_completed", "task_failed", "task_cancelled", "task_unresolved"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _sse_event(block: bytes) -> tuple[str, str]:
    kind, data = "", ""
    for line in block.decode().split("\n"):
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:]
    return kind, data


async def read_sse(
    reply: aiohttp.ClientResponse, indices: list[int], streams: Streams
) -> dict[str, Any] | None:
    """Read one response's events to the terminal one; its outcome (``None``: the stream
    ended without one). Only the chunks' text and the terminal outcome are parsed."""
    buffer = b""
    async for chunk in reply.content.iter_any():
        received = time.time_ns()
        buffer += chunk
        *complete, buffer = buffer.replace(b"\r\n", b"\n").split(b"\n\n")
        for block in complete:
            kind, data = _sse_event(block)
            if kind == "message_delta":
                for index, stamp in stamps(str(json.loads(data).get("text", ""))):
                    indices.append(index)
                    streams.latencies.append((received - stamp) / 1e9)
            elif kind == "observation_gap":
                streams.gaps += int(json.loads(data).get("dropped_events", 1))
            elif kind in TERMINAL_EVENTS:
                outcome = json.loads(data).get("outcome")
                return outcome if isinstance(outcome, dict) else {}
    return None


async def sse_stream(
    client: aiohttp.ClientSession, number: int, streams: Streams, clock: Clock
) -> None:
    """One run over HTTP: ``POST /v1/tasks/stream`` read to its terminal event."""
    indices: list[int] = []
    streams.started += 1
    clock.first_start = min(clock.first_start, time.perf_counter())
    try:
        async with client.post("/v1/tasks/stream", json={"input": f"stream {number}"}) as reply:
            reply.raise_for_status()
            outcome = await read_sse(reply, indices, streams)
        if outcome is None:
            fate, output, detail = "stream ended without a terminal event", "", ""
        else:
            fate = "Completed" if outcome.get("type") == "completed" else str(outcome.get("type"))
            output = str((outcome.get("output") or {}).get("text") or "")
            detail = str(outcome)[:300]
    except Exception as error:
        fate, output, detail = f"error:{type(error).__name__}", "", str(error)
    if fate == "Completed":
        clock.last_outcome = max(clock.last_outcome, time.perf_counter())
    streams.account(indices, fate, output, detail)


async def scenario_sse(
    bench: Bench, workers: Sequence[WorkerProcess], settings: Settings
) -> SseResult:
    plan = bench.plan
    env = child_environment(settings)
    env.update(plan.model_env)
    env["AHP_API_TOKENS"] = json.dumps({TENANT: [TOKEN]})
    api = ApiServer(env, _free_port(), bench.log_dir / "api.log")
    await asyncio.to_thread(api.start)
    try:
        node = Node(worker_pids(workers), whole_tree=True)
        counters = Counters(bench.redis_url, settings.namespace)
        groups: dict[str, Callable[[], float]] = {
            "client": lambda: cpu(os.getpid()),
            "api": tree_reading(api.pid),
            **{label: tree_reading(pid) for label, pid in node.pids.items()},
            "redis": bench.redis_cpu,
        }
        async with aiohttp.ClientSession(
            f"http://127.0.0.1:{api.port}",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=aiohttp.ClientTimeout(total=plan.task_timeout),
            connector=aiohttp.TCPConnector(limit=0),
        ) as client:
            try:
                warm = Streams(plan.chunks)
                await asyncio.gather(*(sse_stream(client, n, warm, Clock()) for n in range(4)))
                if warm.not_completed:
                    raise RuntimeError(f"SSE warm-up failed: {warm.failures('warm-up')}")
                await wait_idle(counters)
                await counters.reset()
                samples = Samples(idle_rss=node.memory())
                streams = Streams(plan.chunks)
                clock = Clock()
                quiet = await bench.wait_for_quiet(groups)
                async with Sampler(
                    bench.redis_url, settings.namespace, node, {"api": api.pid}, samples
                ):
                    with cpu_window(groups) as window:
                        await asyncio.gather(
                            *(
                                sse_stream(client, n, streams, clock)
                                for n in range(plan.sse_streams)
                            )
                        )
                window.wall = clock.wall
                window.waited, window.quiet = quiet
                peak_all = (await counters.peaks())[1]
            finally:
                await counters.aclose()
        check_alive(workers)
    finally:
        await asyncio.to_thread(api.stop)
    return SseResult(streams, window, samples, peak_all)


# -- (f) langgraph dev --------------------------------------------------------------------


LANGGRAPH_CONFIG = {
    "dependencies": ["."],
    "graphs": {"scale": str(ROOT / "bench" / "scale_langgraph_graph.py") + ":graph"},
    "env": {},
}


class LangGraphDev:
    """``langgraph dev`` (its in-memory runtime) from a separate venv, in a process group
    of its own, with nothing of this project on its path; offline (tracing off)."""

    def __init__(self, executable: Path, plan: Plan, jobs: int, log_dir: Path) -> None:
        self.executable = executable
        self.port = _free_port()
        self.jobs = jobs
        self.home = log_dir / "langgraph-dev"
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "langgraph.json").write_text(json.dumps(LANGGRAPH_CONFIG))
        self.log = log_dir / "langgraph-dev.log"
        self.env = {
            "PATH": f"{executable.parent}:/usr/bin:/bin",
            "HOME": str(self.home),
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
            **plan.model_env,
        }
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        command = [
            str(self.executable), "dev", "--no-browser", "--no-reload",
            "--port", str(self.port), "--n-jobs-per-worker", str(self.jobs),
            "--config", "langgraph.json", "--server-log-level", "warning",
        ]  # fmt: skip
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=self.home,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"langgraph dev exited with {self.process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{self.port}/ok", timeout=1).is_success:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"langgraph dev did not answer /ok within 120 s; see {self.log}")

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@dataclass
class InFlight:
    now: int = 0


async def langgraph_stream(
    client: aiohttp.ClientSession, number: int, streams: Streams, clock: Clock, flight: InFlight
) -> None:
    """One stateless run, ``POST /runs/stream`` (``messages-tuple``), read to its end."""
    indices: list[int] = []
    pieces: list[str] = []
    streams.started += 1
    clock.first_start = min(clock.first_start, time.perf_counter())
    fate, detail, started = "Completed", "", False
    body = {
        "assistant_id": "scale",
        "input": {"messages": [{"role": "user", "content": f"task {number}"}]},
        "stream_mode": ["messages-tuple"],
    }
    try:
        async with client.post("/runs/stream", json=body) as reply:
            reply.raise_for_status()
            buffer = b""
            async for chunk in reply.content.iter_any():
                received = time.time_ns()
                buffer += chunk
                *complete, buffer = buffer.replace(b"\r\n", b"\n").split(b"\n\n")
                for block in complete:
                    kind, data = _sse_event(block)
                    if kind == "error":
                        fate, detail = "error event", data[:300]
                    elif kind == "messages":
                        message = json.loads(data)[0]
                        text = str(message.get("content") or "")
                        for index, stamp in stamps(text):
                            if not started:
                                started = True
                                flight.now += 1
                            indices.append(index)
                            pieces.append(text)
                            streams.latencies.append((received - stamp) / 1e9)
    except Exception as error:
        fate, detail = f"error:{type(error).__name__}", str(error)
    finally:
        if started:
            flight.now -= 1
    if fate == "Completed":
        clock.last_outcome = max(clock.last_outcome, time.perf_counter())
    # No outcome comes with this stream mode: what the client received is the answer.
    streams.account(indices, fate, "".join(pieces), detail)


async def scenario_langgraph_dev(bench: Bench, executable: Path) -> LangGraphDevResult:
    """(f): ``--tasks`` runs at once on ``langgraph dev`` with as many jobs per worker."""
    plan = bench.plan
    server = LangGraphDev(executable, plan, plan.tasks, bench.log_dir)
    await asyncio.to_thread(server.start)
    try:
        async with aiohttp.ClientSession(
            f"http://127.0.0.1:{server.port}",
            timeout=aiohttp.ClientTimeout(total=plan.task_timeout),
            connector=aiohttp.TCPConnector(limit=0),
        ) as client:
            warm = Streams(plan.chunks)
            flight = InFlight()
            await asyncio.gather(
                *(langgraph_stream(client, n, warm, Clock(), flight) for n in range(4))
            )
            if warm.not_completed:
                raise RuntimeError(f"langgraph dev warm-up failed: {warm.failures('warm-up')}")
            await asyncio.sleep(1.0)
            idle = memory(server.pid, whole_tree=True)
            members = tree(server.pid)
            streams, clock = Streams(plan.chunks), Clock()
            peak = {"inflight": 0, "rss": 0, "rss_inflight": 0}

            async def sample() -> None:
                while True:
                    peak["inflight"] = max(peak["inflight"], flight.now)
                    used = sum(rss(pid) for pid in members)
                    if used > peak["rss"]:
                        peak["rss"], peak["rss_inflight"] = used, flight.now
                    await asyncio.sleep(SAMPLE_SECONDS)

            groups: dict[str, Callable[[], float]] = {
                "client": lambda: cpu(os.getpid()),
                "langgraph dev": tree_reading(server.pid),
            }
            quiet = await bench.wait_for_quiet(groups)
            sampler = asyncio.create_task(sample())
            try:
                with cpu_window(groups) as window:
                    await asyncio.gather(
                        *(
                            langgraph_stream(client, n, streams, clock, flight)
                            for n in range(plan.tasks)
                        )
                    )
            finally:
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler
            window.wall = clock.wall
            window.waited, window.quiet = quiet
    finally:
        await asyncio.to_thread(server.stop)
    return LangGraphDevResult(
        plan.tasks, streams, window, idle, peak["rss"], peak["inflight"], peak["rss_inflight"]
    )


# -- main -----------------------------------------------------------------------------------

T = TypeVar("T")


async def attempt(label: str, work: Callable[[], Awaitable[T]], results: Results) -> T | None:
    print(f"[{time.strftime('%H:%M:%S')}] {label} ...", flush=True)
    try:
        return await work()
    except Exception as error:
        traceback.print_exc()
        results.aborted.append(f"{label}: aborted: {type(error).__name__}: {error}"[:600])
        return None


async def run(
    bench: Bench,
    only: frozenset[str],
    lg_dev: Path | None = None,
    lg_note: str = "not measured (no --langgraph-dev given)",
) -> Results:
    """The scenarios ``only`` names; (f) when ``lg_dev`` names ``langgraph`` (else
    ``lg_note`` says why not)."""
    results = Results()
    if "a" in only or "d" in only:
        got = await attempt("(a) runs on one loop", lambda: scenario_threads(bench), results)
        if got is not None:
            result, workers, settings = got
            if "a" in only:
                results.threads = result
            try:
                if "d" in only:
                    results.sse = await attempt(
                        "(d) SSE through one API process",
                        lambda: scenario_sse(bench, workers, settings),
                        results,
                    )
            finally:
                await stop_workers(workers)
    if "b" in only:
        results.prefork = await attempt(
            "(b) today's prefork layout", lambda: scenario_prefork(bench), results
        )
    if "e" in only:
        results.reference = await attempt(
            "(e) the floor: in-process reference", lambda: scenario_reference(bench), results
        )
    if lg_dev is None:
        results.langgraph_dev_note = lg_note
    else:
        results.langgraph_dev = await attempt(
            "(f) the same graph on langgraph dev",
            lambda: scenario_langgraph_dev(bench, lg_dev),
            results,
        )
        if results.langgraph_dev is None:
            results.langgraph_dev_note = f"not measured (it failed: {results.aborted[-1]})"
            results.aborted.pop()  # LangGraph's server's failure, not this harness's
    return results


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = Plan()
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=defaults.tasks)
    parser.add_argument("--processes", type=int, default=defaults.processes)
    parser.add_argument("--runs-per-process", type=int, default=defaults.runs_per_process)
    parser.add_argument("--prefork-tasks", type=int, default=defaults.prefork_tasks)
    parser.add_argument("--prefork-processes", type=int, default=defaults.prefork_processes)
    parser.add_argument("--prefork-concurrency", type=int, default=defaults.prefork_concurrency)
    parser.add_argument("--sse-streams", type=int, default=defaults.sse_streams)
    parser.add_argument("--model-seconds", type=float, default=defaults.model_seconds)
    parser.add_argument("--task-timeout", type=float, default=defaults.task_timeout)
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=defaults.quiet_wait,
        help="before each measured window, wait at most this many seconds until processes "
        "outside the run used < 10 %% of the machine for 3 s (0: do not wait)",
    )
    parser.add_argument(
        "--only", default="a,b,d,e", help="scenarios to run, comma separated (default a,b,d,e)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="(a): where each process's CPU goes (py-spy)"
    )
    parser.add_argument(
        "--langgraph-dev", type=Path, help="the `langgraph` executable of a separate venv"
    )
    parser.add_argument("--log-dir", type=Path, help="worker and API logs (default: temp dir)")
    parser.add_argument("--redis-url", help="an external Redis 8 (search + JSON)")
    parser.add_argument("--results-page", type=Path, default=RESULTS_PAGE)
    parser.add_argument("--no-results-page", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    only = frozenset(part.strip() for part in args.only.split(",") if part.strip())
    if not only or not only <= SCENARIOS:
        raise SystemExit(f"--only takes letters among {','.join(sorted(SCENARIOS))}")
    plan = Plan(
        tasks=args.tasks,
        processes=args.processes,
        runs_per_process=args.runs_per_process,
        prefork_tasks=args.prefork_tasks,
        prefork_processes=args.prefork_processes,
        prefork_concurrency=args.prefork_concurrency,
        sse_streams=args.sse_streams,
        model_seconds=args.model_seconds,
        task_timeout=args.task_timeout,
        quiet_wait=args.quiet_wait,
        profile=args.profile,
    )
    command = "python bench/scale.py" + "".join(f" {arg}" for arg in (argv or sys.argv[1:]))
    commit, where = git_state(), machine()
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    out = Report()
    load = os.getloadavg()
    out(
        f"python {platform.python_version()}; cpus {os.cpu_count()}; load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; commit {commit}"
    )
    out(f"plan: {plan}")
    started = time.perf_counter()
    lg_dev: Path | None = args.langgraph_dev
    lg_note = "not measured (no --langgraph-dev given)"
    if lg_dev is not None and not lg_dev.is_file():
        lg_dev, lg_note = None, f"not measured ({args.langgraph_dev} does not exist)"

    def go(redis_url: str, redis_pid: int | None) -> Results:
        bench = Bench(redis_url, redis_pid, plan, log_dir)
        return asyncio.run(run(bench, only, lg_dev, lg_note))

    if args.redis_url:
        out(f"redis: {args.redis_url} (external: its CPU is not counted)")
        results = go(args.redis_url, None)
    else:
        with EmbeddedRedis() as server:
            out(f"redis: embedded Redis 8 at {server.url}")
            results = go(server.url, server.pid)
    found = report(out, results, plan)
    out(f"\nwall time of the run: {time.perf_counter() - started:.0f} s; logs in {log_dir}")
    code = 1 if found else 0
    out(f"exit code {code}")
    if not args.no_results_page:
        write_section(args.results_page, section_body(commit, command, out.lines, where))
        print(f"results written to {args.results_page} ({SECTION})")
    return code


if __name__ == "__main__":
    sys.exit(main())
