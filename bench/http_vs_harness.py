#!/usr/bin/env python
"""What the HTTP API costs over the Python harness, measured side by side in one run.

    python bench/http_vs_harness.py [--quick]

One embedded Redis 8, two ``celery worker`` OS processes (prefork ``-c 1``), and the API
served by uvicorn in its own process (``ahp-celery api``), all started here. Both paths
run the same deterministic chat model (profile ``scripted``) on the same workers:

* harness      -- ``CeleryHarness`` in this process: ``create_session`` + ``start_task``
                  + ``await_outcome`` (the session is released untimed);
* harness-stream -- the same, the caller following ``task.events()`` to the terminal
                  event before the outcome (what a streaming HTTP client receives);
* http-stream  -- the same flow over HTTP with ``aiohttp``: the session and its first task
                  in one request, ``POST /v1/tasks/stream`` with ``on_completion: keep``,
                  whose answer is the task's Server-Sent Events until the terminal one;
                  the session's later tasks (throughput) ``POST
                  /v1/sessions/{id}/tasks/stream`` (LangGraph's Agent Server: ``POST
                  /threads/{id}/runs/stream``);
* http-wait    -- ``POST /v1/tasks?wait=`` with ``on_completion: keep``, which answers with
                  the outcome; later tasks ``POST /v1/sessions/{id}/tasks?wait=``;
* http-stream-2req, http-wait-2req -- the same with the session created by a request of
                  its own first, ``POST /v1/sessions`` (LangGraph: ``POST /threads`` +
                  ``POST /threads/{id}/runs/stream``); latency only, reported without a
                  target: the second request is a round trip the harness path does not make;
* harness-run  -- ``create_session(single_task=True)`` + ``start_task`` +
                  ``await_outcome``: a session that ends with its task;
* harness-run-stream -- the same, following ``task.events()`` to the end;
* http-run-stream -- the same in one request, ``POST /v1/tasks/stream`` ("create, run and
                  stream" as LangGraph's stateless ``POST /runs/stream``);
* http-run-wait -- ``POST /v1/tasks?wait=`` (LangGraph's ``POST /runs/wait``);
* http-round-trip -- ``GET /healthz`` alone (latency only): one request's floor, no
                  harness work behind it.

Each HTTP flow is compared with the harness flow that does the same work in the caller's
process: the streaming flows with the caller following every event, the waiting flows with
the caller awaiting the outcome; the two-request flows in plain sessions, the one-request
runs in single-task sessions.

Scenarios:
 (a) latency: fresh-session tasks one at a time, samples of the paths interleaved
     (rotating order); median and p95 per path, ratio to its harness flow.
 (b) throughput: S chains of T sequential tasks, all chains concurrently, per path (a
     session per chain; for the runs, a session per task); tasks/s and ratio to its
     harness flow.

Every outcome is counted and must be Completed with the scripted reply; a run with
failures exits non-zero. Nothing here asserts timings: the targets block only reports.
The LangGraph Agent Server figures (about 1 s per run, poll-bound, and 34 runs/s on its
dev server) are quoted from the issue, not measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import httpx  # noqa: E402
import redis  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402
from agent_harness_protocol import (  # noqa: E402
    Completed,
    SessionSpec,
    TaskRequest,
    TerminalEvent,
    TextInput,
)

from bench import http_sdk_flows as sdk  # noqa: E402
from bench.latency_throughput import _children, _proc_cpu, machine_busy, tree_cpu  # noqa: E402
from bench.results_page import RESULTS_PAGE, printed_into_section  # noqa: E402
from harness import CeleryHarness, CelerySession  # noqa: E402
from tooling.embedded_redis import EmbeddedRedis  # noqa: E402
from tooling.worker_process import WorkerProcess  # noqa: E402
from wire.keys import Keys  # noqa: E402
from wire.settings import Settings  # noqa: E402

AHP_CELERY = str(Path(sys.executable).with_name("ahp-celery"))
"""The API is served as a deployment serves it: ``ahp-celery api`` (one uvicorn process)."""
TOKEN = "bench-" + uuid4().hex
TENANT = "bench"
PROMPT = "what does the bench measure?"
LANGGRAPH_SERVER_RUN_S = 1.0
LANGGRAPH_SERVER_RUNS_PER_S = 34.0


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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the two paths ------------------------------------------------------------------------
ONE_REQUEST = ""
"""The "session" of a one-request flow: each task creates its own."""


class HarnessPath:
    """The harness in this process. ``single_task``: every task in a session of its own
    that ends with it (what the API's one-request runs do). ``stream``: the caller follows
    every event of the task (``task.events()`` to the terminal one) before its outcome,
    as an HTTP client of a streaming route receives them all; else it only awaits the
    outcome, as a waiting route does."""

    def __init__(
        self, harness: CeleryHarness, *, single_task: bool = False, stream: bool = False
    ) -> None:
        self.harness = harness
        self.single_task = single_task
        self.stream = stream
        self.name = ("harness-run" if single_task else "harness") + ("-stream" if stream else "")
        self._sessions: dict[str, CelerySession] = {}

    async def session(self) -> str:
        if self.single_task:
            return ONE_REQUEST
        session = await self.harness.create_session(SessionSpec(), tenant=TENANT)
        self._sessions[session.id.value] = session
        return session.id.value

    async def task(self, session_id: str, tally: Tally) -> None:
        if self.single_task:
            session = await self.harness.create_session(
                SessionSpec(), tenant=TENANT, single_task=True
            )
        else:
            session = self._sessions[session_id]
        task = await session.start_task(TaskRequest(TextInput(PROMPT)))
        if self.stream:
            terminal = None
            async for event in task.events():
                terminal = event
            if not isinstance(terminal, TerminalEvent):
                tally.count("stream-without-terminal")
                return
        outcome = await task.await_outcome()
        ok = isinstance(outcome, Completed) and outcome.output is not None
        tally.count("completed" if ok else type(outcome).__name__.lower())

    async def fresh(self, tally: Tally) -> str:
        """A task in a fresh session; the session to release after it."""
        session_id = await self.session()
        await self.task(session_id, tally)
        return session_id

    async def release(self, session_id: str) -> None:
        if session_id != ONE_REQUEST:
            await self._sessions.pop(session_id).release()


class HttpPath:
    """The HTTP flow with aiohttp: its client spends about 0.4 ms per request here, httpx's
    about 1.2 ms (GET /healthz, one keep-alive connection; a raw socket: 0.3 ms), and the
    client's cost is not the API's. ``run``: one request creates the session and runs the
    task (``POST /v1/tasks``), and the session ends with it. Else the session stays for
    more tasks: a fresh one and its first task in one request (``POST /v1/tasks`` with
    ``on_completion: keep``), or with ``two_requests`` created by ``POST /v1/sessions``
    first; sessions created ahead (the throughput chains) by ``POST /v1/sessions``."""

    def __init__(
        self,
        client: aiohttp.ClientSession,
        *,
        stream: bool,
        run: bool = False,
        two_requests: bool = False,
    ) -> None:
        self.client = client
        self.stream = stream
        self.run = run
        self.two_requests = two_requests
        self.name = (
            ("http-run-" if run else "http-")
            + ("stream" if stream else "wait")
            + ("-2req" if two_requests else "")
        )

    async def fresh(self, tally: Tally) -> str:
        """A task in a fresh session; the session to release after it."""
        if self.run or self.two_requests:
            session_id = await self.session()
            await self.task(session_id, tally)
            return session_id
        session_id = await self._task("/v1/tasks", tally, {"on_completion": "keep"})
        if not session_id:
            raise RuntimeError("the run that keeps its session did not name it")
        return session_id

    async def session(self) -> str:
        if self.run:
            return ONE_REQUEST
        async with self.client.post("/v1/sessions", json={}) as reply:
            reply.raise_for_status()
            return str((await reply.json())["id"])

    async def task(self, session_id: str, tally: Tally) -> None:
        path = "/v1/tasks" if self.run else f"/v1/sessions/{session_id}/tasks"
        await self._task(path, tally)

    async def _task(self, path: str, tally: Tally, extra: dict[str, str] | None = None) -> str:
        """One task; the id of its session."""
        body = {"input": PROMPT, **(extra or {})}
        if self.stream:
            # Start the task and read its events in the same response.
            session_id, outcome = await self._stream(f"{path}/stream", body)
        else:
            # Start the task and answer with its outcome in the same response.
            async with self.client.post(path, json=body, params={"wait": "30"}) as reply:
                reply.raise_for_status()
                answer = await reply.json()
                session_id, outcome = str(answer.get("session_id", "")), answer.get("outcome")
        ok = isinstance(outcome, dict) and outcome.get("type") == "completed"
        tally.count("completed" if ok else str((outcome or {}).get("type", "none")))
        return session_id

    async def _stream(
        self, path: str, body: dict[str, str]
    ) -> tuple[str, dict[str, object] | None]:
        """Read the response's events until the terminal one: the session id of the
        ``task_created`` event and the terminal one's outcome; only those two are parsed.
        Reading by chunk, not by line: aiohttp's line iterator cost this client more CPU
        per task than the API spent sending the events."""
        session_id = ""
        async with self.client.post(path, json=body) as events:
            events.raise_for_status()
            buffer = b""
            async for chunk in events.content.iter_any():
                buffer += chunk
                *complete, buffer = buffer.replace(b"\r\n", b"\n").split(b"\n\n")
                for event in complete:
                    if not session_id:
                        session_id = _created_session(event)
                    outcome = _terminal_outcome(event)
                    if outcome is not None:
                        return session_id, outcome
        return session_id, None

    async def release(self, session_id: str) -> None:
        if session_id == ONE_REQUEST:
            return  # its session ended with its task
        async with self.client.delete(f"/v1/sessions/{session_id}") as reply:
            reply.raise_for_status()


class RoundTripPath:
    """One ``GET /healthz``: what a single HTTP request costs here, with no harness work
    behind it (the API's floor per request). Latency scenario only."""

    name = "http-round-trip"

    def __init__(self, client: aiohttp.ClientSession) -> None:
        self.client = client

    async def session(self) -> str:
        return ONE_REQUEST

    async def fresh(self, tally: Tally) -> str:
        await self.task(ONE_REQUEST, tally)
        return ONE_REQUEST

    async def task(self, session_id: str, tally: Tally) -> None:
        async with self.client.get("/healthz") as reply:
            await reply.read()
            tally.count("completed" if reply.status == 200 else f"http-{reply.status}")

    async def release(self, session_id: str) -> None:
        return None


BASELINE = {
    "http-stream": "harness-stream",
    "http-wait": "harness",
    "http-run-stream": "harness-run-stream",
    "http-run-wait": "harness-run",
    **sdk.BASELINE,
}
"""Each HTTP flow's harness flow: the same work in the caller's process (the same
sessions, and every event delivered to the caller for the streaming flows)."""
TWO_REQUESTS = {"http-stream-2req": "harness-stream", "http-wait-2req": "harness"}
"""Latency only, no target: the flows above with the session created by a request of its
own, a round trip more than the harness path makes."""


TERMINAL_EVENTS = {"task_completed", "task_failed", "task_cancelled", "task_unresolved"}


def _event(event: bytes) -> tuple[str, str]:
    """The name and data of one SSE event."""
    kind, data = "", ""
    for line in event.decode().split("\n"):
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:]
    return kind, data


def _terminal_outcome(event: bytes) -> dict[str, object] | None:
    """The outcome of one SSE event if it is a terminal one (``{}`` if it has none)."""
    kind, data = _event(event)
    if kind not in TERMINAL_EVENTS:
        return None
    outcome = json.loads(data).get("outcome")
    return outcome if isinstance(outcome, dict) else {}


def _created_session(event: bytes) -> str:
    """The session id of a ``task_created`` event (else empty)."""
    kind, data = _event(event)
    return str(json.loads(data).get("session_id", "")) if kind == "task_created" else ""


Path_ = HarnessPath | HttpPath | RoundTripPath | sdk.SdkPath | sdk.LangGraphHttpPath


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


async def fresh_sample(path: Path_, tally: Tally, quiet: Quiet) -> float:
    started = time.perf_counter()
    session_id = await path.fresh(tally)
    elapsed = time.perf_counter() - started
    await path.release(session_id)
    await quiet()
    return elapsed


async def scenario_latency(
    paths: Sequence[Path_], plan: Plan, quiet: Quiet
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
    _report_failures("latency", tallies)
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
    path: Path_, plan: Plan, groups: dict[str, list[int]], redis_url: str, quiet: Quiet
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


def _report_failures(scenario: str, tallies: dict[str, Tally]) -> None:
    for name, tally in tallies.items():
        if tally.failures:
            FAILURES.append(f"{scenario}/{name}: {dict(tally.outcomes)}")


# -- the deployment -----------------------------------------------------------------------
class ApiServer:
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


def _env(settings: Settings) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("AHP_")}
    env.update(
        {
            "AHP_REDIS_URL": settings.redis_url,
            "AHP_NAMESPACE": settings.namespace,
            "AHP_QUEUE": settings.queue,
            "AHP_PROFILE": settings.profile,
            "AHP_API_TOKENS": json.dumps({TENANT: [TOKEN]}),
        }
    )
    return env


def _print_round(name: str, result: Throughput) -> None:
    cpu = "  ".join(f"{group} {ms:4.1f}" for group, ms in result.cpu_ms.items())
    calls = "  ".join(f"{command} {n:.1f}" for command, n in result.redis_calls.items())
    total = sum(result.redis_calls.values())
    switches = "  ".join(f"{group} {n:.1f}" for group, n in result.switches.items())
    print(f"  round {name:12} {result.rate:7.1f} tasks/s   CPU ms/task: {cpu}", flush=True)
    print(f"        preemptions/task: {switches}", flush=True)
    print(f"        Redis commands/task {total:.1f}: {calls}", flush=True)


async def run(plan: Plan, log_dir: Path, show_rounds: bool = False) -> int:
    with EmbeddedRedis() as redis_server:
        settings = Settings(
            redis_url=redis_server.url,
            namespace=f"bench-{uuid4().hex[:8]}",
            queue=f"ahp.bench.{uuid4().hex[:8]}",
            profile="scripted",
        )
        workers = [
            WorkerProcess(
                settings,
                concurrency=1,
                pool="prefork",
                loglevel="warning",
                log_path=log_dir / f"worker-{index}.log",
                name=f"{settings.namespace}-{index}",
            )
            for index in range(2)
        ]
        api = ApiServer(_env(settings), _free_port(), log_dir / "api.log")
        try:
            for worker in workers:
                worker.start(timedelta(seconds=60))
            api.start()
            async with (
                CeleryHarness(settings) as harness,
                aiohttp.ClientSession(
                    api.url,
                    headers={"Authorization": f"Bearer {TOKEN}"},
                    timeout=aiohttp.ClientTimeout(total=60),
                    connector=aiohttp.TCPConnector(limit=200),
                ) as client,
                sdk.sdk_client(api.url, TOKEN) as sdk_client,
                sdk.lg_client(api.url, TOKEN) as lg_client,
            ):
                paths: list[Path_] = [
                    HarnessPath(harness),
                    HarnessPath(harness, stream=True),
                    HttpPath(client, stream=True),
                    HttpPath(client, stream=False),
                    HarnessPath(harness, single_task=True),
                    HarnessPath(harness, single_task=True, stream=True),
                    HttpPath(client, stream=True, run=True),
                    HttpPath(client, stream=False, run=True),
                    # The LangGraph dialect: the SDK's client, then the same requests
                    # through aiohttp (see bench/http_sdk_flows.py).
                    sdk.SdkPath(sdk_client, settings.profile, PROMPT, run=False),
                    sdk.SdkPath(sdk_client, settings.profile, PROMPT, run=True),
                    sdk.LangGraphHttpPath(lg_client, settings.profile, PROMPT, run=False),
                    sdk.LangGraphHttpPath(lg_client, settings.profile, PROMPT, run=True),
                ]
                quiet = Quiet(redis_server.url, Keys(settings.namespace))
                two_requests = [
                    HttpPath(client, stream=True, two_requests=True),
                    HttpPath(client, stream=False, two_requests=True),
                ]
                latency = await scenario_latency(
                    [*paths, *two_requests, RoundTripPath(client)], plan, quiet
                )
                groups = {
                    "bench": [os.getpid()],
                    "api": [api.pid],
                    "workers": [pid for worker in workers if (pid := worker.pid) is not None],
                    "redis": [redis_server.pid or 0],
                }
                rounds: dict[str, list[Throughput]] = {path.name: [] for path in paths}
                for _ in range(plan.rounds):
                    for path in paths:
                        result, tally = await scenario_throughput(
                            path, plan, groups, redis_server.url, quiet
                        )
                        _report_failures("throughput", {path.name: tally})
                        if show_rounds:
                            _print_round(path.name, result)
                        rounds[path.name].append(result)
                await quiet.aclose()
                # Each path's median round (by rate), with its CPU figures.
                throughput = {
                    name: sorted(results, key=lambda r: r.rate)[len(results) // 2]
                    for name, results in rounds.items()
                }
        finally:
            api.stop()
            for worker in workers:
                worker.stop()
    _print(latency, throughput, plan)
    if FAILURES:
        print("\nFAILURES:", *FAILURES, sep="\n  ")
        return 1
    return 0


def _print(latency: dict[str, list[float]], throughput: dict[str, Throughput], plan: Plan) -> None:
    print(f"\nplan: {plan}; 2 worker processes (prefork -c 1), API: one uvicorn process")
    print("\n(a) fresh-session latency (create session + task to its outcome)")
    for name, values in latency.items():
        median = statistics.median(values)
        p95 = percentile(values, 0.95)
        if name == RoundTripPath.name:
            print(
                f"  {name:15} median {median * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms"
                "  (GET /healthz: one request's floor)"
            )
            continue
        base = statistics.median(latency[{**BASELINE, **TWO_REQUESTS}.get(name, name)])
        print(
            f"  {name:15} median {median * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms"
            f"  ratio {median / base:5.2f}"
            + ("  (two requests; no target)" if name in TWO_REQUESTS else "")
        )
    print(
        f"\n(b) throughput (all chains concurrently, the median of {plan.rounds} "
        "interleaved rounds)"
    )
    for name, result in throughput.items():
        cpu = "  ".join(f"{group} {ms:4.1f}" for group, ms in result.cpu_ms.items())
        base_rate = throughput[BASELINE.get(name, name)].rate
        print(
            f"  {name:15} {result.rate:7.1f} tasks/s  ratio {result.rate / base_rate:5.2f}"
            f"   CPU ms/task: {cpu}"
        )
    print("\ntargets (reported, not asserted), each HTTP flow against its harness flow")
    for name, baseline in BASELINE.items():
        added = statistics.median(latency[name]) / statistics.median(latency[baseline]) - 1
        kept = throughput[name].rate / throughput[baseline].rate
        print(
            f"  {name:15} latency added {added * 100:+5.1f} % (target <= +20 %): "
            f"{'met' if added <= 0.20 else 'NOT met'};  throughput kept {kept * 100:5.1f} % "
            f"(target >= 80 %): {'met' if kept >= 0.80 else 'NOT met'}"
            + (f"  [{sdk.CLIENT[name]}]" if name in sdk.CLIENT else "")
        )
    print(
        f"  vs the LangGraph Agent Server's create-run-and-stream (quoted, not measured here: "
        f"~{LANGGRAPH_SERVER_RUN_S:.0f} s/run, {LANGGRAPH_SERVER_RUNS_PER_S:.0f} runs/s):"
    )
    for name in ("http-stream", "http-run-stream", "sdk-stream", "sdk-run-stream"):
        median = statistics.median(latency[name])
        print(
            f"  {name:15} {LANGGRAPH_SERVER_RUN_S / median:.0f}x lower latency, "
            f"{throughput[name].rate / LANGGRAPH_SERVER_RUNS_PER_S:.1f}x the throughput"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="a short run (smoke test)")
    parser.add_argument(
        "--rounds",
        action="store_true",
        help="print every throughput round: CPU by process group and Redis commands by name",
    )
    parser.add_argument("--results-page", type=Path, default=RESULTS_PAGE)
    parser.add_argument("--no-results-page", action="store_true")
    args = parser.parse_args(argv)
    page = None if args.no_results_page else args.results_page
    given = list(argv if argv is not None else sys.argv[1:])
    with (
        tempfile.TemporaryDirectory(prefix="bench-http-") as logs,
        printed_into_section("http_vs_harness.py", given, page),
    ):
        return asyncio.run(run(Plan.of(args.quick), Path(logs), args.rounds))


if __name__ == "__main__":
    sys.exit(main())
