"""The rig of ``bench/http_vs_harness.py``: the tallies, the two scenarios (latency
one sample at a time, throughput in concurrent chains, with CPU, preemptions and Redis
commands per task) and the API process. The flows themselves are in
``bench/http_paths.py`` and ``bench/http_sdk_flows.py``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx
import redis
import redis.asyncio as aioredis

from bench.latency_throughput import _children, _proc_cpu, machine_busy, tree_cpu
from wire.keys import Keys
from wire.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
AHP_CELERY = str(Path(sys.executable).with_name("ahp-celery"))
"""The API is served as a deployment serves it: ``ahp-celery api`` (one uvicorn process)."""


@dataclass(frozen=True, slots=True)
class Plan:
    latency_samples: int
    sessions: int
    turns: int
    warm_up: int
    rounds: int = 5
    """Throughput rounds per path, the paths interleaved round by round."""

    @classmethod
    def of(cls, quick: bool) -> Plan:
        if quick:
            return cls(latency_samples=20, sessions=10, turns=5, warm_up=5, rounds=1)
        return cls(latency_samples=100, sessions=30, turns=10, warm_up=20, rounds=5)


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)

    def count(self, name: str) -> None:
        self.outcomes[name] += 1

    @property
    def failures(self) -> int:
        return sum(n for name, n in self.outcomes.items() if name != "completed")


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FlowPath(Protocol):
    """One flow of the bench: how it makes a session (or none), runs a task in it, runs a
    task in a fresh one, and releases a session afterwards (untimed)."""

    @property
    def name(self) -> str: ...

    async def session(self) -> str: ...

    async def task(self, session_id: str, tally: Tally) -> None: ...

    async def fresh(self, tally: Tally) -> str: ...

    async def release(self, session_id: str) -> None: ...


# -- scenarios ----------------------------------------------------------------------------
class Quiet:
    """Waits until the workers have no maintenance work left (a released or ended
    session's checkpoint thread being deleted), so one sample's cleanup never runs in the
    next sample's window. A two-request flow's release waits for its deletion anyway; a
    one-request run's session is deleted by a worker after its outcome arrived."""

    def __init__(self, redis_url: str, keys: Keys) -> None:
        self._redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
        self._keys = keys

    async def __call__(self) -> None:
        async with asyncio.timeout(30):
            while await self._pending():  # noqa: ASYNC110 (polled from Redis)
                await asyncio.sleep(0.001)

    async def _pending(self) -> int:
        consumers = await self._redis.smembers(self._keys.maintenance_consumers())
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.llen(self._keys.maintenance_queue())
            for consumer in consumers:
                pipe.llen(self._keys.maintenance_processing(str(consumer)))
            return sum(int(n) for n in await pipe.execute())

    async def aclose(self) -> None:
        await self._redis.aclose()


async def fresh_sample(path: FlowPath, tally: Tally, quiet: Quiet) -> float:
    started = time.perf_counter()
    session_id = await path.fresh(tally)
    elapsed = time.perf_counter() - started
    await path.release(session_id)
    await quiet()
    return elapsed


async def scenario_latency(
    paths: Sequence[FlowPath], plan: Plan, quiet: Quiet
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {path.name: [] for path in paths}
    tallies = {path.name: Tally() for path in paths}
    for path in paths:
        for _ in range(plan.warm_up):
            await fresh_sample(path, Tally(), quiet)
    for index in range(plan.latency_samples):
        order = list(paths[index % len(paths) :]) + list(paths[: index % len(paths)])
        for path in order:
            samples[path.name].append(await fresh_sample(path, tallies[path.name], quiet))
    report_failures("latency", tallies)
    return samples


@dataclass(frozen=True, slots=True)
class Throughput:
    rate: float
    """Tasks per second."""
    cpu_ms: dict[str, float]
    """CPU milliseconds per task, by process group (this process, the API, the workers,
    Redis), and what every other process of the machine used meanwhile."""
    redis_calls: dict[str, float]
    """Redis commands per task, by command (``INFO commandstats``), the busiest first."""
    switches: dict[str, float]
    """Involuntary context switches per task, by process group: preemptions, a measure
    of how much the processes fought over the cores."""


def preemptions(pids: Sequence[int], *, descendants: bool = True) -> int:
    """Involuntary context switches of ``pids`` (and their descendants), all threads."""
    total, seen, stack = 0, set(), list(pids)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        with contextlib.suppress(OSError, ValueError):
            for thread in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{thread}/status") as status:
                    for line in status:
                        if line.startswith("nonvoluntary_ctxt_switches:"):
                            total += int(line.split()[1])
        if descendants:
            stack.extend(_children(pid))
    return total


def command_calls(redis_url: str) -> Counter[str]:
    """Calls of every Redis command so far (``INFO commandstats``)."""
    client = redis.Redis.from_url(redis_url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return Counter(
        {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}
    )


async def scenario_throughput(
    path: FlowPath, plan: Plan, groups: dict[str, list[int]], redis_url: str, quiet: Quiet
) -> tuple[Throughput, Tally]:
    tally = Tally()
    await quiet()  # the round before it has cleaned up
    sessions = [await path.session() for _ in range(plan.sessions)]

    async def chain(session_id: str) -> None:
        for _ in range(plan.turns):
            await path.task(session_id, tally)

    def used(name: str, pids: list[int]) -> float:
        # This process is the parent of every other group: count it alone.
        return _proc_cpu(pids[0]) if name == "bench" else tree_cpu(pids)

    calls_before = command_calls(redis_url)
    cpu_before = {name: used(name, pids) for name, pids in groups.items()}

    def preempted(name: str, pids: list[int]) -> int:
        return preemptions(pids, descendants=name != "bench")

    switches_before = {name: preempted(name, pids) for name, pids in groups.items()}
    busy_before = machine_busy()
    started = time.perf_counter()
    await asyncio.gather(*(chain(session_id) for session_id in sessions))
    elapsed = time.perf_counter() - started
    tasks = plan.sessions * plan.turns
    cpu = {
        name: (used(name, pids) - cpu_before[name]) * 1000 / tasks for name, pids in groups.items()
    }
    cpu["other"] = max(0.0, (machine_busy() - busy_before) * 1000 / tasks - sum(cpu.values()))
    switches = {
        name: (preempted(name, pids) - switches_before[name]) / tasks
        for name, pids in groups.items()
    }
    calls = command_calls(redis_url)
    calls.subtract(calls_before)
    calls["info"] -= 1  # the reading itself
    per_task = {name: n / tasks for name, n in calls.most_common() if n > 0}
    for session_id in sessions:
        await path.release(session_id)
    return Throughput(tasks / elapsed, cpu, per_task, switches), tally


FAILURES: list[str] = []


def report_failures(scenario: str, tallies: dict[str, Tally]) -> None:
    for name, tally in tallies.items():
        if tally.failures:
            FAILURES.append(f"{scenario}/{name}: {dict(tally.outcomes)}")


# -- the deployment -----------------------------------------------------------------------
class ApiServer:
    """The API as a deployment serves it: ``ahp-celery api``, one uvicorn process."""

    def __init__(self, env: dict[str, str], port: int, log: Path) -> None:
        self.env, self.port, self.log = env, port, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [AHP_CELERY, "api", "--port", str(self.port), "--log-level", "warning"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the API exited; see {self.log}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).is_success:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"the API did not answer; see {self.log}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def api_env(settings: Settings, tenant: str, token: str) -> dict[str, str]:
    """The API process's environment: this deployment's settings, one tenant's token."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AHP_")}
    env.update(
        {
            "AHP_REDIS_URL": settings.redis_url,
            "AHP_NAMESPACE": settings.namespace,
            "AHP_QUEUE": settings.queue,
            "AHP_PROFILE": settings.profile,
            "AHP_API_TOKENS": json.dumps({tenant: [token]}),
        }
    )
    return env
