#!/usr/bin/env python
"""Soak test of faults: many tasks through the harness while workers are SIGKILLed or
stalled past their lease, Redis restarts and malformed messages reach the queue.

    .venv/bin/python bench/soak.py            # 50 sessions x 20 tasks, 3 workers, kill every 4 s
    .venv/bin/python bench/soak.py --quick    # smoke run: 10 sessions x 5 tasks
    .venv/bin/python bench/soak.py --sessions 80 --tasks-per-session 25 --kill-every 3 --seed 7

What runs: an embedded Redis 8 (search + JSON) on a free port; ``--workers`` separate
``celery worker`` OS processes (``tooling.worker_process.WorkerProcess``; ``--pool
threads``, the deployment's layout, 20 runs each, or ``--pool prefork``, 2 children each)
with short lease settings (lease_ttl 3 s, sweep_interval 0.5 s, so a lost task is found
and resumed within seconds); one ``harness.CeleryHarness`` in this
process running ``--sessions`` sessions concurrently, each running its
``--tasks-per-session`` tasks one after another. The chat model
(``bench.soak_model:SoakChatModel``, profile registry ``bench.soak_profiles:PROFILES``)
streams its answer over a random 0.2-1.5 s and records every call's start and end (Redis
clock, pid, process group, session, task) under the soak-only key prefix ``soak:<ns>:``.
Every third session's agent first calls a tool with a real effect (``bench.soak_tools``),
which works on for 0.3-1.2 s after its effect, so kills land mid-effect: ``soak_effect``
(at least once: deduplicates its effect by the call's idempotency key) in sessions 1, 4,
7 ..., ``soak_effect_once`` (at most once) in sessions 2, 5, 8 ....
Meanwhile a chaos loop SIGKILLs a random worker (its whole process group, like a lost
machine) every ``--kill-every`` seconds (jittered 0.5x-1.5x), never the last live one, and
starts a replacement; a ``--pause-share`` of these faults instead SIGSTOPs the worker for
1.5-2.5 lease TTLs (a GC or VM stall: its leases lapse and other workers resume its tasks)
and then SIGCONTs it. Redis itself (append-only) restarts ``--redis-restarts`` times, and a
malformed ``ahp.run_task`` message (bodies ``5``, ``null``, ``{}``, ``[1]``, a string
``timelimit`` header, ...) is pushed onto the queue every ``--malformed-every`` seconds.
Fault times are stamped with Redis ``TIME`` (the clock of the claims).

What it checks, once every task has an outcome (or the ``--deadline`` passed, or no
outcome arrived for ``--stall-timeout`` seconds while tasks were pending):

* outcomes by type (Completed / Failed / Unresolved / Cancelled) as the caller saw them,
  and whether they agree with the task records in Redis;
* lost tasks: no terminal outcome by the deadline (a session whose task is lost cannot
  start its next tasks: they are counted as "not submitted");
* duplicate terminals: a task's event stream holding more than one terminal entry;
* overlapping runs: two model calls of one session overlapping in time while both their
  processes were alive (a call of a killed worker never records its end; it ends at the
  kill of its process group);
* resumed tasks (``deliveries`` > 1) and their recovery time: ``claimed_ms`` of the last
  claim minus the time of the kill that interrupted it (the kill of the worker whose
  model call of that task was cut off; if no call of it was cut off -- killed before its
  model call started -- the most recent kill before the claim). It is split, from the
  sweepers' "publishing it again" log lines (worker wall clock = the host clock of Redis
  TIME), into kill -> first publication (finding the loss: lease lapse + sweep) and
  publication -> claim (waiting in the broker queue behind the other sessions' tasks);
* tool effects, as the tools recorded them: an at-least-once call performs its effect
  exactly once however often it ran, an at-most-once call never runs twice; and at least
  one call of each kind was lost mid-effect (run again, resp. left unknown);
* each session's checkpoint thread (``AsyncRedisSaver.aget_tuple``, thread id = session
  id): exactly one human input per completed task (message id = task id); "duplicated
  inputs" means a turn ran twice into the thread, "missing inputs" a completed turn that
  is not in it; and Completed outputs equal the model's answer to that task's input.

Context figures: sweeper publications per resumption, run messages the claim dropped
(busy / terminal / exhausted), broker queue backlog and live workers (sampled every
0.5 s), kombu ``unacked`` entries left by killed workers (restored only after
``visibility_timeout``). For every lost, duplicated or non-Completed task it prints the
evidence: task and session records, lease, running set, broker queue and kombu
``unacked`` entries, the kills around it with each victim's last log line, the worker
log lines naming the task and its model calls.

Also: every resume is attributed to the fault that caused it (the kill that cut its model
call, else the kill or stall of a worker whose log shows it took the task's message); a
model call of a stalled worker may overlap its successor only while the worker is stopped
and for at most 1 s after SIGCONT; every session's checkpoint chain is linear (no fork, no
checkpoint off the latest chain) and its thread holds exactly the answers the callers
received, in order.

Exit status 1 on any lost task, duplicate terminal, overlap, task not Completed, duplicated,
missing or foreign input, wrong output, caller/record mismatch, start error (a refused
start is retried: the contract makes that safe), worker that exited without being killed,
unattributed resume, fork, unseen answer, unconfirmed start run twice, recovery p50 over
10 s -- and when a fault it claims to inject did not happen (no kill, no resume after a
kill or a pause, fewer Redis restarts than asked, no malformed message): a soak in which
nothing happened proves nothing.
Worker logs stay in the printed log directory; Redis (a temporary directory) does not.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import math
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Read checkpoints the way the workers write them (workers/__init__.py sets the same).
os.environ.setdefault("LANGGRAPH_STRICT_MSGPACK", "true")

import redis.asyncio as aioredis  # noqa: E402
from agent_harness_protocol import (  # noqa: E402
    AgentSession,
    Cancelled,
    Completed,
    Failed,
    HarnessTransportError,
    SessionSpec,
    TaskOutcome,
    TaskRequest,
    TaskStartUnconfirmedError,
    TextInput,
    TextOutput,
    Unresolved,
)
from langgraph.checkpoint.redis.aio import AsyncRedisSaver  # noqa: E402
from redis.exceptions import BusyLoadingError as RedisBusyLoadingError  # noqa: E402
from redis.exceptions import ConnectionError as RedisConnectionError  # noqa: E402
from redis.exceptions import TimeoutError as RedisTimeoutError  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.soak_model import call_key, calls_key, expected_reply, soak_prefix  # noqa: E402
from bench.soak_tools import tool_effects_key, tool_runs_key  # noqa: E402
from harness import CeleryHarness  # noqa: E402
from tooling.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig  # noqa: E402
from tooling.worker_process import Pool, WorkerProcess  # noqa: E402
from wire.keys import Keys  # noqa: E402
from wire.records import TaskField  # noqa: E402
from wire.settings import Settings  # noqa: E402

console = Console(highlight=False, soft_wrap=True)
if not console.is_terminal:
    console.width = 120  # a log file gets the table unwrapped

LEASE_TTL = timedelta(seconds=3)
SWEEP_INTERVAL = timedelta(seconds=0.5)
RECOVERY_P50_LIMIT_S = 10.0
WORKER_START_TIMEOUT = timedelta(seconds=90)
SAMPLE_SECONDS = 0.5
START_RETRIES = 40
"""A start refused while Redis restarts is retried every 0.5 s, up to this many times."""
PAUSE_TAIL_LIMIT_S = 1.0
"""A model call of a stalled worker may go on this long after SIGCONT (until its run sees
that it lost the lease); longer means a run kept calling the model without its lease."""
MALFORMED_BODIES: tuple[object, ...] = (5, None, {}, [1], {"x": 1}, "not a task")
PROGRESS_SECONDS = 10.0
INF = math.inf
SESSION_PROFILES = ("soak", "soak-tool", "soak-tool-once")
"""Session i runs profile ``SESSION_PROFILES[i % 3]`` (``bench.soak_profiles``)."""


# -- records --------------------------------------------------------------------------------


@dataclass
class TaskResult:
    session_index: int
    session_id: str
    task_id: str
    text: str
    outcome: TaskOutcome | None = None
    lost: bool = False
    seconds: float = 0.0
    submitted_us: int = 0
    """Redis TIME just before ``start_task``."""


@dataclass
class Kill:
    pgid: int
    hostname: str
    before_us: int
    """Redis TIME just before SIGKILL: the moment of the loss."""
    after_us: int
    """Redis TIME once the whole process group was gone."""
    log_path: Path


@dataclass
class Pause:
    pgid: int
    hostname: str
    before_us: int
    """Redis TIME just before SIGSTOP of the worker's whole process group."""
    after_us: int
    """Redis TIME just after SIGCONT: the stalled process runs again from here."""
    log_path: Path


@dataclass
class Call:
    call_id: str
    pid: int
    pgid: int
    session: str
    task: str
    start_us: int
    end_us: int | None
    how: str
    closed_by_kill: Kill | None = None

    @property
    def effective_end(self) -> float:
        if self.end_us is not None:
            return self.end_us
        if self.closed_by_kill is not None:
            return self.closed_by_kill.after_us
        return INF


@dataclass
class RunState:
    results: list[TaskResult] = field(default_factory=list)
    start_errors: list[str] = field(default_factory=list)
    sessions: dict[int, AgentSession] = field(default_factory=dict)
    not_submitted: int = 0
    give_up: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when outcomes stopped arriving for ``--stall-timeout``: pending tasks are lost."""
    gave_up_reason: str = ""
    backlog: list[int] = field(default_factory=list)
    """Broker queue length, sampled every ``SAMPLE_SECONDS``."""
    live_workers: list[int] = field(default_factory=list)
    """Live worker processes, sampled every ``SAMPLE_SECONDS``."""
    start_retries: int = 0
    """Starts refused with ``HarnessTransportError`` (surely not delivered) and retried."""
    unconfirmed: list[TaskResult] = field(default_factory=list)
    """Starts that raised ``TaskStartUnconfirmedError``: they may run, at most once."""
    redis_restarts: list[tuple[int, int]] = field(default_factory=list)
    """(before, after) Redis TIME of each restart of the server under load."""
    malformed_sent: int = 0
    malformed_ids: list[str] = field(default_factory=list)
    """The ``id`` header of every malformed message sent."""


async def redis_time_us(client: aioredis.Redis) -> int:
    """Redis TIME in microseconds; retried while the server restarts (at most 60 s)."""
    for _ in range(600):
        try:
            seconds, micros = await client.time()
            return int(seconds) * 1_000_000 + int(micros)
        except (RedisConnectionError, RedisTimeoutError, RedisBusyLoadingError):
            await asyncio.sleep(0.1)
    raise RuntimeError("Redis did not come back within 60 s")


# -- workers and chaos ----------------------------------------------------------------------


class Chaos:
    """The worker pool and the loop that kills and replaces its members."""

    def __init__(
        self,
        settings: Settings,
        size: int,
        concurrency: int,
        log_dir: Path,
        rng: random.Random,
        kill_every: float,
        redis: aioredis.Redis,
        pause_share: float = 0.0,
        pool: Pool = "threads",
    ) -> None:
        self.settings = settings
        self.pool: Pool = pool
        self.size = size
        self.concurrency = concurrency
        self.log_dir = log_dir
        self.rng = rng
        self.kill_every = kill_every
        self.redis = redis
        self.live: list[WorkerProcess] = []
        self.all: list[WorkerProcess] = []
        self.kills: list[Kill] = []
        self.pause_share = pause_share
        self.pauses: list[Pause] = []
        self.paused: set[int] = set()
        """Process groups stopped right now (never picked again until resumed)."""
        self.unexpected_exits: list[str] = []
        """Workers that died although nobody killed them (a poison message, a crash)."""
        self.start_failures: list[str] = []
        self._serial = 0
        self._starting: set[asyncio.Task[None]] = set()

    def _new_worker(self) -> WorkerProcess:
        self._serial += 1
        worker = WorkerProcess(
            self.settings,
            concurrency=self.concurrency,
            pool=self.pool,
            loglevel="info",
            log_path=self.log_dir / f"worker-{self._serial:03d}.log",
            name=f"soak-w{self._serial:03d}",
        )
        self.all.append(worker)
        return worker

    async def _start_one(self, attempts: int = 3) -> None:
        for _ in range(attempts):
            worker = self._new_worker()
            try:
                await asyncio.to_thread(worker.start, WORKER_START_TIMEOUT)
            except Exception as error:
                self.start_failures.append(f"{worker.hostname}: {error}")
                console.print(f"[red]worker {worker.hostname} failed to start:[/] {error}")
                await asyncio.sleep(1.0)
                continue
            self.live.append(worker)
            return

    async def start_pool(self) -> None:
        await asyncio.gather(*(self._start_one() for _ in range(self.size)))

    async def run(self, stop: asyncio.Event) -> None:
        """Every ~kill_every s, SIGKILL a random live worker (and start its replacement) or,
        with probability ``pause_share``, SIGSTOP one past the lease TTL and SIGCONT it."""
        resumes: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            wait = self.kill_every * self.rng.uniform(0.5, 1.5)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            if stop.is_set():
                break
            self.notice_exits()
            running = [w for w in self.live if w.running and w.pid not in self.paused]
            if len(running) < 2:
                continue  # never the last worker that runs
            victim = self.rng.choice(running)
            pgid = victim.pid
            if pgid is None:
                continue  # it exited just now: the monitor records that
            # The first fault is a stall when stalls are asked for, so even a short run
            # has one; later ones are drawn.
            first = not self.kills and not self.pauses and not self.paused
            if self.pause_share > 0 and (first or self.rng.random() < self.pause_share):
                stall = LEASE_TTL.total_seconds() * self.rng.uniform(1.5, 2.5)
                resume = asyncio.create_task(self._pause(victim, pgid, stall))
                resumes.add(resume)
                resume.add_done_callback(resumes.discard)
                continue
            # Out of the live list first: the monitor must not take the victim, half killed
            # (its process already forgotten), for a worker that died by itself.
            self.live.remove(victim)
            before = await redis_time_us(self.redis)
            await asyncio.to_thread(victim.kill)
            after = await redis_time_us(self.redis)
            self.kills.append(Kill(pgid, victim.hostname, before, after, victim.log_path))
            self._replace()
        if resumes:
            await asyncio.gather(*resumes, return_exceptions=True)

    async def _pause(self, victim: WorkerProcess, pgid: int, seconds: float) -> None:
        """A stall of the whole worker (a GC or VM pause): its leases lapse meanwhile."""
        self.paused.add(pgid)
        before = await redis_time_us(self.redis)
        os.killpg(pgid, signal.SIGSTOP)
        try:
            await asyncio.sleep(seconds)
        finally:
            os.killpg(pgid, signal.SIGCONT)
            after = await redis_time_us(self.redis)
            self.paused.discard(pgid)
            self.pauses.append(Pause(pgid, victim.hostname, before, after, victim.log_path))

    def _replace(self) -> None:
        starting = asyncio.create_task(self._start_one())
        self._starting.add(starting)
        starting.add_done_callback(self._starting.discard)

    def notice_exits(self) -> None:
        """Workers that exited although the chaos loop did not kill them: recorded (the run
        fails) and replaced, so one crash does not starve the rest of the run."""
        for worker in list(self.live):
            if worker.running or worker.pid in self.paused:
                continue
            self.live.remove(worker)
            self.unexpected_exits.append(
                f"{worker.hostname} exited with {worker.returncode}; log tail:\n{worker.log_tail()}"
            )
            self._replace()

    async def settle_starts(self) -> None:
        if self._starting:
            await asyncio.gather(*self._starting, return_exceptions=True)

    async def stop_all(self) -> None:
        await self.settle_starts()
        await asyncio.gather(
            *(asyncio.to_thread(worker.stop) for worker in self.live), return_exceptions=True
        )
        for worker in self.all:
            worker.kill()  # idempotent; nothing is left behind


# -- the load ---------------------------------------------------------------------------------


async def run_session(
    harness: CeleryHarness,
    index: int,
    tasks: int,
    deadline: float,
    state: RunState,
    clock: aioredis.Redis,
) -> None:
    loop = asyncio.get_running_loop()
    session: AgentSession | None = None
    for _ in range(START_RETRIES):
        try:
            session = await harness.create_session(SessionSpec())
            break
        except HarnessTransportError:
            # Surely not written (Redis restarting): the contract says retrying is safe.
            state.start_retries += 1
            await asyncio.sleep(0.5)
        except Exception as error:
            state.start_errors.append(f"session {index}: create_session: {error!r}")
            break
    if session is None:
        state.not_submitted += tasks
        return
    state.sessions[index] = session
    for number in range(tasks):
        remaining = deadline - loop.time()
        if remaining <= 0 or state.give_up.is_set():
            state.not_submitted += tasks - number
            return
        text = f"soak session {index} task {number} {uuid4().hex[:6]}"
        began = loop.time()
        submitted_us = await redis_time_us(clock)
        task = None
        for _ in range(START_RETRIES):
            try:
                task = await session.start_task(TaskRequest(TextInput(text)))
                break
            except HarnessTransportError:
                state.start_retries += 1
                await asyncio.sleep(0.5)
            except TaskStartUnconfirmedError as error:
                # It may run, at most once; the session stays blocked. Checked at the end.
                reference = error.reference
                state.unconfirmed.append(
                    TaskResult(index, session.id.value, str(reference.request_id), text)
                )
                state.not_submitted += tasks - number
                return
            except Exception as error:
                state.start_errors.append(f"session {index} task {number}: {error!r}")
                break
        if task is None:
            state.not_submitted += tasks - number
            return
        result = TaskResult(index, session.id.value, task.id.value, text, submitted_us=submitted_us)
        state.results.append(result)
        outcome = asyncio.ensure_future(task.await_outcome())
        give_up = asyncio.ensure_future(state.give_up.wait())
        await asyncio.wait({outcome, give_up}, timeout=remaining, return_when="FIRST_COMPLETED")
        give_up.cancel()
        result.seconds = loop.time() - began
        if not outcome.done():
            outcome.cancel()
            result.lost = True
            state.not_submitted += tasks - number - 1
            return  # the session is busy with the lost task: nothing more can start
        result.outcome = outcome.result()


async def monitor(
    state: RunState,
    chaos: Chaos,
    total: int,
    stop: asyncio.Event,
    client: aioredis.Redis,
    queue: str,
    stall_timeout: float,
) -> None:
    """Sample the broker backlog and the live workers; print progress; give up on a stall
    (no new outcome for ``stall_timeout`` s while tasks are pending)."""
    started = last_change = last_print = time.monotonic()
    last_done = 0
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SAMPLE_SECONDS)
        now = time.monotonic()
        with contextlib.suppress(Exception):
            lists = Keys.broker_queue_lists(queue)
            state.backlog.append(sum([int(await client.llen(name)) for name in lists]))
        chaos.notice_exits()
        state.live_workers.append(sum(1 for worker in chaos.live if worker.running))
        done = sum(1 for result in state.results if result.outcome is not None)
        if done != last_done:
            last_done, last_change = done, now
        pending = len(state.results) - done
        if pending and now - last_change > stall_timeout and not state.give_up.is_set():
            state.gave_up_reason = (
                f"no outcome for {stall_timeout:g} s with {pending} tasks pending: "
                "they count as lost"
            )
            console.print(f"  [yellow]{state.gave_up_reason}[/]")
            state.give_up.set()
        if now - last_print >= PROGRESS_SECONDS:
            last_print = now
            console.print(
                f"  {now - started:6.0f} s: {done}/{total} outcomes, {len(chaos.kills)} kills, "
                f"{state.live_workers[-1]} live workers, backlog "
                f"{state.backlog[-1] if state.backlog else '?'}"
            )


# -- checks ----------------------------------------------------------------------------------


@dataclass
class Findings:
    rows: list[tuple[str, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, math.ceil(q / 100 * len(ordered)) - 1)
    return ordered[rank]


async def read_calls(client: aioredis.Redis, namespace: str) -> list[Call]:
    # A start stamp retried after a reply lost to a Redis restart lists its call twice.
    listed = [str(call_id) for call_id in await client.lrange(calls_key(namespace), 0, -1)]
    ids = list(dict.fromkeys(listed))
    async with client.pipeline(transaction=False) as pipe:
        for call_id in ids:
            pipe.hgetall(call_key(namespace, call_id))
        records = await pipe.execute()
    calls = []
    for call_id, record in zip(ids, records, strict=True):
        calls.append(
            Call(
                call_id,
                int(record["pid"]),
                int(record["pgid"]),
                record["session"],
                record["task"],
                int(record["start_us"]),
                int(record["end_us"]) if "end_us" in record else None,
                record.get("how", "-"),
            )
        )
    return calls


def attribute_kills(calls: list[Call], kills: list[Kill]) -> int:
    """Close each unended call at the first kill of its process group after it started;
    returns how many unended calls no kill explains."""
    by_group: dict[int, list[Kill]] = defaultdict(list)
    for kill in kills:
        by_group[kill.pgid].append(kill)
    unexplained = 0
    for call in calls:
        if call.end_us is not None:
            continue
        for kill in sorted(by_group.get(call.pgid, []), key=lambda k: k.before_us):
            if kill.after_us >= call.start_us:
                call.closed_by_kill = kill
                break
        else:
            unexplained += 1
    return unexplained


def find_overlaps(calls: list[Call]) -> list[tuple[Call, Call]]:
    """Pairs of calls of one session whose (effective) intervals intersect."""
    by_session: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        by_session[call.session].append(call)
    pairs: list[tuple[Call, Call]] = []
    for session_calls in by_session.values():
        session_calls.sort(key=lambda c: c.start_us)
        open_calls: list[Call] = []
        for call in session_calls:
            open_calls = [c for c in open_calls if c.effective_end > call.start_us]
            pairs.extend((earlier, call) for earlier in open_calls)
            open_calls.append(call)
    return pairs


async def evidence(
    client: aioredis.Redis,
    settings: Settings,
    result: TaskResult,
    chaos: Chaos,
    calls: list[Call],
    origin_us: int,
) -> list[str]:
    """What Redis, the kills and the worker logs say about one task (for the report)."""
    keys = Keys(settings.namespace)
    task_id, session_id = result.task_id, result.session_id
    lines = [f"evidence for task {task_id} (session {session_id}, input {result.text!r}):"]
    lines.append(f"  submitted at {fmt_us(result.submitted_us, origin_us)} (Redis clock)")
    lines.append(f"  task record: {await client.hgetall(keys.task(task_id))}")
    entries: Any = await client.xrange(keys.events(task_id))
    lines.append(f"  event stream tags: {[fields.get('t') for _, fields in entries]}")
    lines.append(f"  session record: {await client.hgetall(keys.session(session_id))}")
    lines.append(f"  tool attempts: {await client.hgetall(keys.tool_attempts(task_id))}")
    async with AsyncRedisSaver(redis_client=client) as saver:
        config: Any = {"configurable": {"thread_id": session_id, "checkpoint_ns": ""}}
        stored = await saver.aget_tuple(config)
        if stored is not None:
            values: Any = stored.checkpoint["channel_values"]
            shown = [
                getattr(m, "type", "?")
                + ("+tool_calls" if getattr(m, "tool_calls", None) else "")
                + f"({str(getattr(m, 'text', ''))[:24]!r})"
                for m in values.get("messages", [])[-4:]
            ]
            lines.append(
                f"  thread's latest checkpoint: last messages {shown}, "
                f"metadata {stored.metadata}, pending writes {len(stored.pending_writes or [])}"
            )
    lease = await client.get(keys.lease(session_id))
    lines.append(
        f"  session lease: {lease!r} (pttl {await client.pttl(keys.lease(session_id))} ms), "
        f"fence counter {await client.get(keys.fence(session_id))!r}"
    )
    lines.append(f"  in running set: {await client.zscore(keys.running(), task_id)}")
    queued = []
    async for key in client.scan_iter(match=f"{settings.queue}*"):
        if await client.type(key) == "list":
            queued += [key for item in await client.lrange(key, 0, -1) if task_id in item]
    lines.append(f"  messages in broker queue lists: {len(queued)} {queued}")
    unacked = await client.hgetall("unacked")
    tags = [tag for tag, payload in unacked.items() if task_id in payload]
    for tag in tags:
        score = await client.zscore("unacked_index", tag)
        # kombu stamps the worker's time.time() when it takes the message off the queue
        # (same host clock as Redis TIME here).
        when = "?" if score is None else fmt_us(score * 1e6, origin_us)
        lines.append(f"  kombu 'unacked' entry {tag!s}: taken off the queue by a worker at {when}")
    if not tags:
        lines.append("  kombu 'unacked' entries naming it: none")
    near = [
        kill
        for kill in chaos.kills
        if result.submitted_us - 2_000_000 <= kill.before_us <= result.submitted_us + 15_000_000
    ]
    for kill in near:
        mentions = 0
        with contextlib.suppress(OSError):
            mentions = kill.log_path.read_text(errors="replace").count(task_id)
        last_line = ""
        with contextlib.suppress(OSError):
            stamped = [
                line
                for line in kill.log_path.read_text(errors="replace").splitlines()
                if line.startswith("[")
            ]
            last_line = stamped[-1] if stamped else ""
        lines.append(
            f"  kill of {kill.hostname} (pgid {kill.pgid}) at {fmt_us(kill.before_us, origin_us)}"
            f"; its log mentions the task {mentions} times ({kill.log_path.name}); "
            f"its last log line: {last_line}"
        )
    for worker in chaos.all:
        with contextlib.suppress(OSError):
            text = worker.log_path.read_text(errors="replace")
            for line in text.splitlines():
                if task_id in line:
                    lines.append(f"  {worker.log_path.name}: {line}")
    for call in calls:
        if call.task == task_id:
            lines.append(
                f"  model call {call.call_id} pgid {call.pgid} "
                f"[{fmt_us(call.start_us, origin_us)}, {fmt_us(call.effective_end, origin_us)}]"
                f" {call.how}"
            )
    return lines


_REPUBLISHED = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): WARNING/[^\]]*\] "
    r"task ([0-9a-f]+) lost its worker; publishing it again"
)
_NOT_RUN = re.compile(r"task [0-9a-f]+ not run: (\w+)")
_RECEIVED = re.compile(r"Task ahp\.run_task\[([0-9a-f]+)\] received")


@dataclass
class LogFacts:
    republished: dict[str, list[int]]
    """When a sweeper published each lost task again (epoch us)."""
    dropped: Counter[str]
    """Run messages the claim dropped, by reason (``task <id> not run: <reason>``)."""
    received: dict[str, set[Path]]
    """The logs of the workers that took each task's run message off the broker."""


def scan_logs(workers: list[WorkerProcess]) -> LogFacts:
    """What the worker logs say. Log stamps are the worker's local wall clock (ms), the
    same host clock as Redis TIME."""
    times: dict[str, list[int]] = defaultdict(list)
    dropped: Counter[str] = Counter()
    received: dict[str, set[Path]] = defaultdict(set)
    for worker in workers:
        with contextlib.suppress(OSError):
            for line in worker.log_path.read_text(errors="replace").splitlines():
                taken = _RECEIVED.search(line)
                if taken:
                    received[taken[1]].add(worker.log_path)
                    continue
                match = _REPUBLISHED.match(line)
                if match:
                    stamp = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                    times[match[2]].append(int(stamp * 1e6))
                    continue
                not_run = _NOT_RUN.search(line)
                if not_run:
                    dropped[not_run[1]] += 1
    return LogFacts(times, dropped, received)


async def _tool_effects(
    client: aioredis.Redis, settings: Settings, results: list[TaskResult]
) -> tuple[list[tuple[str, str]], list[tuple[str, list[str]]], tuple[int, int]]:
    """The tools' effects as the tools recorded them (``bench.soak_tools``), against their
    declared delivery: rows, (label, failures) pairs, and how many calls were lost
    mid-effect (at least once: run again; at most once: left unknown)."""
    namespace = settings.namespace
    runs = [json.loads(item) for item in await client.lrange(tool_runs_key(namespace), 0, -1)]
    effects = [json.loads(item) for item in await client.lrange(tool_effects_key(namespace), 0, -1)]
    runs_by_key = Counter(run["key"] for run in runs)
    effects_by_key = Counter(effect["key"] for effect in effects)
    tool_of = {run["key"]: run["tool"] for run in runs}
    least = [key for key, tool in tool_of.items() if tool == "soak_effect"]
    most = [key for key, tool in tool_of.items() if tool == "soak_effect_once"]
    keys = Keys(namespace)
    # A call whose attempt was counted twice but whose tool ran once: its worker was lost
    # mid-call and the at-most-once call was not run again.
    attempts: dict[str, int] = {}
    for result in results:
        counted = await client.hgetall(keys.tool_attempts(result.task_id))
        for call_id, number in counted.items():
            attempts[f"{result.task_id}:{call_id!s}"] = int(number)
    not_once = [
        f"{key}: {effects_by_key[key]} effects" for key in least if effects_by_key[key] != 1
    ]
    twice = [f"{key}: {runs_by_key[key]} executions" for key in most if runs_by_key[key] > 1]
    rerun = sum(1 for key in least if runs_by_key[key] > 1)
    unknown = sum(1 for key in most if attempts.get(key, 1) > 1)
    rows = [
        (
            "tool calls at least once: calls / executions / re-run / effects",
            f"{len(least)} / {sum(runs_by_key[k] for k in least)} / {rerun} / "
            f"{sum(effects_by_key[k] for k in least)}",
        ),
        (
            "tool calls at most once: calls / executions / lost, not run again",
            f"{len(most)} / {sum(runs_by_key[k] for k in most)} / {unknown}",
        ),
    ]
    failures = [
        ("at-least-once call whose deduplicated effect is not exactly one", not_once),
        ("at-most-once call executed more than once", twice),
    ]
    return rows, failures, (rerun, unknown)


def fmt_us(stamp: float, origin: int) -> str:
    return "open" if stamp == INF else f"{(stamp - origin) / 1e6:.3f}s"


async def check(
    settings: Settings,
    state: RunState,
    chaos: Chaos,
    planned: int,
    origin_us: int,
    expected_restarts: int = 0,
    expected_malformed: bool = False,
) -> Findings:
    findings = Findings()
    keys = Keys(settings.namespace)
    pool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=64, timeout=30, decode_responses=True
    )
    client = aioredis.Redis(connection_pool=pool)
    try:
        results = state.results
        # Task records and event streams.
        async with client.pipeline(transaction=False) as pipe:
            for result in results:
                pipe.hgetall(keys.task(result.task_id))
                pipe.xrange(keys.events(result.task_id))
            replies = await pipe.execute()
        records = {r.task_id: replies[2 * i] for i, r in enumerate(results)}
        streams = {r.task_id: replies[2 * i + 1] for i, r in enumerate(results)}

        outcome_types: Counter[str] = Counter()
        for result in results:
            outcome_types[type(result.outcome).__name__ if result.outcome else "none"] += 1
        lost = [r for r in results if r.outcome is None]
        duplicate_terminals = []
        resume_warnings = 0
        mismatched = []
        wrong_outputs = []
        for result in results:
            entries = streams[result.task_id]
            terminals = [f for _, f in entries if f.get("k") == "e" and f.get("t") == "terminal"]
            if len(terminals) > 1:
                duplicate_terminals.append(result.task_id)
            resume_warnings += sum(
                1 for _, f in entries if f.get("t") == "warning" and "lost" in f.get("d", "")
            )
            record = records[result.task_id]
            if result.outcome is not None:
                want = type(result.outcome).__name__.lower()
                if record.get(TaskField.STATE) != want:
                    mismatched.append(f"{result.task_id}: caller {want}, record {record}")
            if isinstance(result.outcome, Completed):
                output = result.outcome.output
                text = output.text if isinstance(output, TextOutput) else repr(output)
                if text != expected_reply(result.text):
                    wrong_outputs.append(f"{result.task_id}: {text!r} for {result.text!r}")

        # Model calls, kills, overlaps. A call of a stalled (SIGSTOPped) worker stays open
        # while its successor runs: that overlap is the stall itself, not two runs calling
        # the model, as long as the stalled call ends promptly once the process runs again.
        calls = await read_calls(client, settings.namespace)
        unexplained_open = attribute_kills(calls, chaos.kills)
        overlaps: list[tuple[Call, Call]] = []
        stall_overlaps: list[tuple[Call, Call, float]] = []
        for earlier, later in find_overlaps(calls):
            # The stalled worker's call overlaps a successor's call that started while it
            # was stopped, or in the tail after SIGCONT, while its run sees that the lease
            # is lost (the tail itself is bounded below).
            stall = next(
                (
                    pause
                    for pause in chaos.pauses
                    if pause.pgid == earlier.pgid
                    and pause.before_us
                    <= later.start_us
                    <= pause.after_us + PAUSE_TAIL_LIMIT_S * 1e6
                ),
                None,
            )
            if stall is None:
                overlaps.append((earlier, later))
            else:
                tail = (earlier.effective_end - stall.after_us) / 1e6
                stall_overlaps.append((earlier, later, tail))
        long_tails = [item for item in stall_overlaps if item[2] > PAUSE_TAIL_LIMIT_S]
        interrupted = sum(1 for c in calls if c.closed_by_kill is not None)
        by_id = {r.task_id: r for r in results}
        suspects = [r.task_id for r in results if r.outcome is None]
        suspects += [t for t in duplicate_terminals if t not in suspects]
        suspects += [
            r.task_id for r in results if isinstance(r.outcome, Failed | Unresolved | Cancelled)
        ][:5]
        suspects += [item.split(":", 1)[0] for item in wrong_outputs][:5]
        for task_id in suspects[:10]:
            findings.details += await evidence(
                client, settings, by_id[task_id], chaos, calls, origin_us
            )

        # Resumed tasks and recovery times.
        calls_by_task: dict[str, list[Call]] = defaultdict(list)
        for call in calls:
            calls_by_task[call.task].append(call)
        recoveries: list[float] = []
        detections: list[float] = []
        queue_waits: list[float] = []
        facts = scan_logs(chaos.all)
        republished, dropped = facts.republished, facts.dropped
        faults: list[Kill | Pause] = [*chaos.kills, *chaos.pauses]
        attributed = by_log = by_pause = 0
        unexplained_resumes: list[str] = []
        resumed = []
        for result in results:
            record = records[result.task_id]
            if int(record.get(TaskField.DELIVERIES, "0") or 0) <= 1:
                continue
            resumed.append(result.task_id)
            claimed_us = int(record[TaskField.CLAIMED_MS]) * 1000
            cut = [
                c
                for c in calls_by_task[result.task_id]
                if c.closed_by_kill is not None and c.start_us < claimed_us
            ]
            kill: Kill | Pause | None = None
            if cut:
                kill = max(cut, key=lambda c: c.start_us).closed_by_kill
                attributed += 1
            else:
                # The fault of a worker that had taken this task's message: its claim (and
                # lease) went with the kill or lapsed during the stall.
                takers = facts.received.get(result.task_id, set())
                candidates = [
                    f for f in faults if f.log_path in takers and f.before_us <= claimed_us
                ]
                if candidates:
                    kill = max(candidates, key=lambda f: f.before_us)
                    if isinstance(kill, Pause):
                        by_pause += 1
                    else:
                        by_log += 1
            if kill is None:
                unexplained_resumes.append(result.task_id)
                continue
            recoveries.append((claimed_us - kill.before_us) / 1e6)
            # claim - kill = (republish - kill) + (claim - republish): finding the loss,
            # then waiting in the broker queue behind other sessions' tasks.
            # The first publication after the loss (the sweeper publishes a lost task again
            # every lease_ttl until it is claimed; later copies are duplicates).
            published = [
                t for t in republished.get(result.task_id, []) if kill.before_us <= t <= claimed_us
            ]
            if published:
                detections.append((min(published) - kill.before_us) / 1e6)
                queue_waits.append((claimed_us - min(published)) / 1e6)

        unacked_left = int(await client.hlen("unacked"))

        # Every malformed message was dropped and counted once by a worker (waiting a
        # little for the last ones sent to be taken off the queue).
        # One taken off the queue by a worker killed before its intake counted it is held
        # in kombu's unacked hash, for redelivery after the visibility timeout: not lost.
        malformed_counted = 0
        malformed_held = 0
        for _ in range(100):
            malformed_counted = int(await client.get(keys.malformed_messages()) or 0)
            held = await client.hvals("unacked")
            malformed_held = sum(
                1 for message_id in state.malformed_ids if any(message_id in item for item in held)
            )
            if malformed_counted + malformed_held >= state.malformed_sent:
                break
            await asyncio.sleep(0.1)

        # Checkpoint threads.
        duplicated_inputs: list[str] = []
        missing_inputs: list[str] = []
        foreign_inputs: list[str] = []
        thread_inputs = 0
        unseen_answers: list[str] = []
        forks: list[str] = []
        orphans: list[str] = []
        checkpoints_seen = 0
        async with AsyncRedisSaver(redis_client=client) as saver:
            by_session: dict[str, list[TaskResult]] = defaultdict(list)
            for result in results:
                by_session[result.session_id].append(result)
            # An unconfirmed start may have run (at most once): its turn may be in the thread.
            maybe_ran: dict[str, dict[str, str]] = defaultdict(dict)
            for result in state.unconfirmed:
                by_session[result.session_id]
                maybe_ran[result.session_id][result.task_id] = expected_reply(result.text)
            for session_id, session_results in by_session.items():
                config: Any = {"configurable": {"thread_id": session_id, "checkpoint_ns": ""}}
                stored = await saver.aget_tuple(config)
                values: Any = {} if stored is None else stored.checkpoint["channel_values"]
                messages: list[Any] = list(values.get("messages", []))
                human = Counter(m.id for m in messages if getattr(m, "type", "") == "human")
                thread_inputs += sum(human.values())
                ours = {r.task_id for r in session_results} | set(maybe_ran[session_id])
                for task_id, count in human.items():
                    if count > 1:
                        duplicated_inputs.append(f"{session_id}/{task_id} x{count}")
                    if task_id not in ours:
                        foreign_inputs.append(f"{session_id}/{task_id}")
                for r in session_results:
                    if isinstance(r.outcome, Completed) and human[r.task_id] == 0:
                        missing_inputs.append(f"{session_id}/{r.task_id}")
                # The thread holds exactly the answers the callers received, in order.
                answers = dict(maybe_ran[session_id])
                answers.update(
                    (r.task_id, r.outcome.output.text)
                    for r in session_results
                    if isinstance(r.outcome, Completed) and isinstance(r.outcome.output, TextOutput)
                )
                asked: str | None = None
                for message in messages:
                    kind = getattr(message, "type", "")
                    if kind == "human":
                        asked = message.id
                    elif kind == "ai" and getattr(message, "tool_calls", None):
                        continue  # a tool call on the way to the answer
                    elif kind == "ai":
                        if asked is None or answers.get(asked) != message.text:
                            unseen_answers.append(f"{session_id}: {message.text[:80]!r}")
                        asked = None
                # The checkpoint chain is linear: every stored checkpoint is an ancestor of
                # the latest one and no checkpoint has two children (a fenced-off writer's
                # checkpoint would fork it).
                children: Counter[str] = Counter()
                ids: dict[str, str | None] = {}
                async for item in saver.alist(config):
                    own = str(item.config["configurable"]["checkpoint_id"])
                    parent = (
                        None
                        if item.parent_config is None
                        else str(item.parent_config["configurable"]["checkpoint_id"])
                    )
                    ids[own] = parent
                    if parent is not None:
                        children[parent] += 1
                checkpoints_seen += len(ids)
                forks += [f"{session_id}/{cid}" for cid, n in children.items() if n > 1]
                chain: set[str] = set()
                cursor = (
                    None if stored is None else str(stored.config["configurable"]["checkpoint_id"])
                )
                while cursor is not None and cursor in ids and cursor not in chain:
                    chain.add(cursor)
                    cursor = ids[cursor]
                orphans += [f"{session_id}/{cid}" for cid in ids if cid not in chain]
    finally:
        await client.aclose()
        await pool.disconnect()

    p50 = percentile(recoveries, 50)
    p95 = percentile(recoveries, 95)
    rows = findings.rows
    rows.append(("tasks planned", str(planned)))
    rows.append(("tasks submitted", str(len(results))))
    for name in ("Completed", "Failed", "Unresolved", "Cancelled"):
        rows.append((f"  outcome {name}", str(outcome_types.get(name, 0))))
    rows.append(("tasks lost (no outcome by deadline)", str(len(lost))))
    rows.append(("duplicate terminals", str(len(duplicate_terminals))))
    rows.append(("overlapping runs (model-call pairs)", str(len(overlaps))))
    rows.append(
        (
            "  stall overlaps / longest tail after SIGCONT",
            f"{len(stall_overlaps)} / "
            f"{max((t for _, _, t in stall_overlaps), default=0.0) * 1000:.0f} ms",
        )
    )
    rows.append(("tasks resumed (deliveries > 1)", str(len(resumed))))
    rows.append(
        (
            "  resumes attributed: cut call / log+kill / log+pause / none",
            f"{attributed} / {by_log} / {by_pause} / {len(unexplained_resumes)}",
        )
    )
    rows.append(("  'worker lost' warnings in streams", str(resume_warnings)))
    rows.append(("kills performed", str(len(chaos.kills))))
    rows.append(("pauses (SIGSTOP past the lease TTL)", str(len(chaos.pauses))))
    rows.append(("Redis restarts under load", str(len(state.redis_restarts))))
    rows.append(
        (
            "malformed messages sent / dropped and counted",
            f"{state.malformed_sent} / {malformed_counted} (+{malformed_held} held for redelivery)",
        )
    )
    rows.append(("workers that exited unkilled", str(len(chaos.unexpected_exits))))
    rows.append(("starts refused (not delivered) and retried", str(state.start_retries)))
    rows.append(("unconfirmed starts", str(len(state.unconfirmed))))
    rows.append(
        (
            "checkpoints stored / forks / off the chain",
            f"{checkpoints_seen} / {len(forks)} / {len(orphans)}",
        )
    )
    rows.append(("answers in threads no caller received", str(len(unseen_answers))))
    rows.append(("model calls / cut off by a kill", f"{len(calls)} / {interrupted}"))
    rows.append(
        (
            "recovery p50 / p95 / max",
            f"{p50:.2f} s / {p95:.2f} s / {max(recoveries, default=float('nan')):.2f} s",
        )
    )
    rows.append(
        (
            "  of which kill -> republish p50 / p95",
            f"{percentile(detections, 50):.2f} s / {percentile(detections, 95):.2f} s "
            f"(n={len(detections)})",
        )
    )
    rows.append(
        (
            "  of which republish -> claim p50 / p95",
            f"{percentile(queue_waits, 50):.2f} s / {percentile(queue_waits, 95):.2f} s",
        )
    )
    publications = sum(len(times) for times in republished.values())
    rows.append(
        (
            "sweeper publications of lost tasks / per resumption",
            f"{publications} / {publications / max(1, resume_warnings):.2f}",
        )
    )
    rows.append(
        (
            "run messages dropped by the claim",
            ", ".join(f"{reason} {count}" for reason, count in sorted(dropped.items())) or "0",
        )
    )
    backlog = state.backlog or [0]
    live = state.live_workers or [0]
    rows.append(
        ("broker queue backlog mean / max", f"{statistics.fmean(backlog):.1f} / {max(backlog)}")
    )
    rows.append(("live workers mean / min", f"{statistics.fmean(live):.2f} / {min(live)}"))
    rows.append(("kombu 'unacked' entries left (killed workers)", str(unacked_left)))
    rows.append(("human inputs found in checkpoint threads", str(thread_inputs)))
    rows.append(("duplicated inputs in threads", str(len(duplicated_inputs))))
    rows.append(("missing inputs in threads", str(len(missing_inputs))))
    rows.append(("inputs of other tasks in threads", str(len(foreign_inputs))))
    rows.append(("Completed outputs not the model's answer", str(len(wrong_outputs))))
    rows.append(("caller outcome != task record", str(len(mismatched))))
    rows.append(("tasks not submitted", str(state.not_submitted)))
    rows.append(("start errors", str(len(state.start_errors))))
    rows.append(("worker start failures", str(len(chaos.start_failures))))

    if lost:
        findings.failures.append(f"{len(lost)} tasks lost")
        findings.details += [f"lost: {r.task_id} (session {r.session_id})" for r in lost[:20]]
    if duplicate_terminals:
        findings.failures.append(f"{len(duplicate_terminals)} duplicate terminals")
        findings.details += [f"duplicate terminal: {t}" for t in duplicate_terminals[:20]]
    if overlaps:
        findings.failures.append(f"{len(overlaps)} overlapping model-call pairs")
        for a, b in overlaps[:20]:
            findings.details.append(
                f"overlap in session {a.session}: call {a.call_id} task {a.task} pgid {a.pgid} "
                f"[{fmt_us(a.start_us, origin_us)}, {fmt_us(a.effective_end, origin_us)}] "
                f"({a.how}) vs call {b.call_id} task {b.task} pgid {b.pgid} "
                f"[{fmt_us(b.start_us, origin_us)}, {fmt_us(b.effective_end, origin_us)}] "
                f"({b.how})"
            )
    if duplicated_inputs:
        findings.failures.append(f"{len(duplicated_inputs)} duplicated inputs")
        findings.details += [f"duplicated input: {d}" for d in duplicated_inputs[:20]]
    if recoveries and p50 > RECOVERY_P50_LIMIT_S:
        findings.failures.append(f"recovery p50 {p50:.2f} s > {RECOVERY_P50_LIMIT_S:g} s")
    not_completed = [
        f"{r.task_id}: {r.outcome}" for r in results if not isinstance(r.outcome, Completed)
    ]
    ran_twice = [
        r.task_id
        for r in state.unconfirmed
        if sum(1 for c in calls_by_task[r.task_id] if c.how == "done") > 1
    ]
    tool_rows, tool_failures, tool_reruns = await _tool_effects(client, settings, results)
    rows += tool_rows
    for label, items in (
        *tool_failures,
        ("task not Completed", not_completed),
        ("missing input", missing_inputs),
        ("input of another task", foreign_inputs),
        ("wrong output", wrong_outputs),
        ("caller/record mismatch", mismatched),
        ("start error", state.start_errors),
        ("worker exited without being killed", chaos.unexpected_exits),
        ("resume no fault explains", unexplained_resumes),
        (
            "stalled call that went on > 1 s after SIGCONT",
            [f"{a.task} pgid {a.pgid}: {tail:.2f} s" for a, _, tail in long_tails],
        ),
        ("checkpoint fork", forks),
        ("checkpoint off the latest chain", orphans),
        ("answer in a thread that no caller received", unseen_answers),
        ("unconfirmed start that ran twice", ran_twice),
        (
            "malformed message not dropped and counted exactly once",
            [f"{state.malformed_sent} sent, {malformed_counted} counted, {malformed_held} held"]
            if malformed_counted + malformed_held != state.malformed_sent
            else [],
        ),
    ):
        if items:
            findings.failures.append(f"{len(items)} x {label}")
            findings.details += [f"{label}: {item}" for item in items[:20]]
    # The run proves nothing unless the faults it claims really happened and were survived.
    expected_faults = (
        ("no worker was killed", not chaos.kills),
        ("no resume followed a kill", attributed + by_log == 0),
        ("no worker was paused", chaos.pause_share > 0 and not chaos.pauses),
        ("no resume followed a pause", chaos.pause_share > 0 and by_pause == 0),
        ("fewer Redis restarts than asked", len(state.redis_restarts) < expected_restarts),
        ("no malformed message was sent", expected_malformed and state.malformed_sent == 0),
        ("no tool call was lost mid-effect and run again (at least once)", tool_reruns[0] == 0),
        ("no tool call was lost mid-effect and left unknown (at most once)", tool_reruns[1] == 0),
    )
    findings.failures += [f"nothing tested: {what}" for what, missing in expected_faults if missing]
    for label, items in (("worker start failure", chaos.start_failures),):
        if items:
            findings.warnings.append(f"{len(items)} x {label}")
            findings.details += [f"{label}: {item}" for item in items[:20]]
    if unexplained_open:
        findings.warnings.append(
            f"{unexplained_open} model calls never ended and no kill explains them "
            "(treated as open until the end: they count in overlaps)"
        )
    if state.gave_up_reason:
        findings.warnings.append(state.gave_up_reason)
    failed = [r for r in results if isinstance(r.outcome, Failed | Unresolved | Cancelled)]
    for r in failed[:20]:
        findings.details.append(f"{type(r.outcome).__name__}: {r.task_id}: {r.outcome}")
    return findings


# -- more faults ------------------------------------------------------------------------------


def malformed_message(queue: str, body: object, headers: dict[str, object], message_id: str) -> str:
    """A message in the exact envelope kombu's Redis transport stores, whose Celery body or
    headers are not a valid ``ahp.run_task`` call (any broker client can send one)."""
    envelope = {
        "body": base64.b64encode(json.dumps(body).encode()).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py",
            "task": "ahp.run_task",
            "id": message_id,
            "root_id": message_id,
            "retries": 0,
            "timelimit": [None, None],
            **headers,
        },
        "properties": {
            "correlation_id": message_id,
            "reply_to": "",
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid4()),
        },
    }
    return json.dumps(envelope)


async def send_malformed(
    client: aioredis.Redis, queue: str, every: float, stop: asyncio.Event, state: RunState
) -> None:
    """Push a malformed run message onto the queue every ``every`` s (bodies 5, null, {},
    [1], ..., then a good-looking body with a string ``timelimit``)."""
    variants: list[tuple[object, dict[str, object]]] = [(body, {}) for body in MALFORMED_BODIES]
    variants.append(([[], {"namespace": "x", "task_id": "y"}, {}], {"timelimit": "soon"}))
    index = 0
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
        if stop.is_set():
            return
        body, headers = variants[index % len(variants)]
        index += 1
        message_id = uuid4().hex
        with contextlib.suppress(RedisConnectionError, RedisTimeoutError, RedisBusyLoadingError):
            await client.lpush(queue, malformed_message(queue, body, headers, message_id))
            state.malformed_sent += 1
            state.malformed_ids.append(message_id)


async def restart_redis(
    server: EmbeddedRedis,
    clock: aioredis.Redis,
    every: float,
    count: int,
    stop: asyncio.Event,
    state: RunState,
) -> None:
    """Restart the server (append-only file kept) ``count`` times, every ``every`` s."""
    for _ in range(count):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
        if stop.is_set():
            return
        before = await redis_time_us(clock)
        await asyncio.to_thread(server.restart)
        after = await redis_time_us(clock)
        state.redis_restarts.append((before, after))
        console.print(f"  Redis restarted ({(after - before) / 1e6:.2f} s down)")


# -- main ------------------------------------------------------------------------------------


async def soak(args: argparse.Namespace, server: EmbeddedRedis, log_dir: Path) -> int:
    redis_url = server.url
    rng = random.Random(args.seed)
    tag = uuid4().hex[:8]
    settings = Settings(
        redis_url=redis_url,
        namespace=f"soak-{tag}",
        queue=f"ahp.soak.{tag}",
        profiles="bench.soak_profiles:PROFILES",
        profile="soak",
        lease_ttl=LEASE_TTL,
        sweep_interval=SWEEP_INTERVAL,
        max_deliveries=args.max_deliveries,
    )
    planned = args.sessions * args.tasks_per_session
    console.print(
        f"settings: lease_ttl {settings.lease_ttl.total_seconds():g} s, sweep_interval "
        f"{settings.sweep_interval.total_seconds():g} s, on_worker_loss "
        f"{settings.on_worker_loss.value}, max_deliveries {settings.max_deliveries}, "
        f"visibility_timeout {settings.visibility_timeout.total_seconds():g} s, "
        f"namespace {settings.namespace}, soak keys {soak_prefix(settings.namespace)}*"
    )
    console.print(
        f"load: {args.sessions} sessions x {args.tasks_per_session} tasks = {planned}; "
        f"{args.workers} workers ({args.pool}, concurrency {args.concurrency}); kill every "
        f"~{args.kill_every:g} s "
        f"(x0.5-1.5); seed {args.seed}; deadline {args.deadline:g} s, stall timeout "
        f"{args.stall_timeout:g} s; worker logs {log_dir}"
    )
    control = aioredis.Redis.from_url(redis_url, decode_responses=True)
    origin_us = await redis_time_us(control)
    chaos = Chaos(
        settings,
        args.workers,
        args.concurrency,
        log_dir,
        rng,
        args.kill_every,
        control,
        args.pause_share,
        args.pool,
    )
    state = RunState()
    injector_errors: list[str] = []
    exit_code = 1
    started = time.monotonic()
    try:
        await chaos.start_pool()
        console.print(f"{len(chaos.live)} workers up after {time.monotonic() - started:.1f} s")
        # Every third session's agent calls a tool with a real effect before answering:
        # at least once (deduplicated by its key) or at most once (bench.soak_tools).
        harnesses = [CeleryHarness(settings, profile=profile) for profile in SESSION_PROFILES]
        load_started = time.monotonic()
        stop = asyncio.Event()
        chaos_task = asyncio.create_task(chaos.run(stop))
        progress = asyncio.create_task(
            monitor(state, chaos, planned, stop, control, settings.queue, args.stall_timeout)
        )
        extra_faults = []
        if args.malformed_every > 0:
            extra_faults.append(
                asyncio.create_task(
                    send_malformed(control, settings.queue, args.malformed_every, stop, state)
                )
            )
        if args.redis_restarts > 0:
            extra_faults.append(
                asyncio.create_task(
                    restart_redis(
                        server, control, args.redis_restart_every, args.redis_restarts, stop, state
                    )
                )
            )
        deadline = asyncio.get_running_loop().time() + args.deadline
        try:
            await asyncio.gather(
                *(
                    run_session(
                        harnesses[index % len(harnesses)],
                        index,
                        args.tasks_per_session,
                        deadline,
                        state,
                        control,
                    )
                    for index in range(args.sessions)
                )
            )
        finally:
            stop.set()
            ended = await asyncio.gather(
                chaos_task, progress, *extra_faults, return_exceptions=True
            )
            # A fault injector that crashed stopped injecting: the run would prove less
            # than it claims.
            injector_errors = [repr(item) for item in ended if isinstance(item, BaseException)]
            await chaos.settle_starts()
        load_seconds = time.monotonic() - load_started
        console.print(f"load finished in {load_seconds:.1f} s; checking ...")
        findings = await check(
            settings,
            state,
            chaos,
            planned,
            origin_us,
            expected_restarts=args.redis_restarts,
            expected_malformed=args.malformed_every > 0,
        )
        if injector_errors:
            findings.failures.append(f"{len(injector_errors)} x fault injector crashed")
            findings.details += [f"fault injector crashed: {e}" for e in injector_errors]
        for harness in harnesses:
            try:
                await asyncio.wait_for(harness.aclose(), 60)
            except Exception as error:
                console.print(f"[yellow]harness.aclose(): {type(error).__name__}: {error}[/]")
    finally:
        await chaos.stop_all()
        await control.aclose()

    table = Table(title=f"soak: faults ({time.monotonic() - started:.0f} s wall)")
    table.add_column("figure", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    for name, value in findings.rows:
        table.add_row(name, value)
    table.add_row("load wall time", f"{load_seconds:.1f} s")
    table.add_row("throughput", f"{len(state.results) / load_seconds:.1f} tasks/s")
    console.print(table)
    for line in findings.details:
        console.print(f"  {line}", markup=False)
    for warning in findings.warnings:
        console.print(f"[yellow]WARNING:[/] {warning}")
    if findings.failures:
        console.print(f"[bold red]FAIL:[/] {'; '.join(findings.failures)}")
    else:
        console.print("[bold green]PASS[/]")
        exit_code = 0
    console.print(f"worker logs: {log_dir}")
    return exit_code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=None, help="default 50 (quick: 10)")
    parser.add_argument("--tasks-per-session", type=int, default=None, help="default 20 (quick: 5)")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (>= 2)")
    parser.add_argument(
        "--pool",
        choices=("threads", "prefork"),
        default="threads",
        help="worker layout: threads (the deployment's: every run of a process on its loop) "
        "or prefork (one run per child)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="runs per worker process (default: 20 threads, 2 prefork children)",
    )
    parser.add_argument(
        "--kill-every", type=float, default=4.0, help="seconds between faults (kill or pause)"
    )
    parser.add_argument(
        "--pause-share",
        type=float,
        default=0.25,
        help="share of the faults that SIGSTOP a worker past the lease TTL, then SIGCONT it",
    )
    parser.add_argument(
        "--redis-restarts", type=int, default=None, help="Redis restarts under load (2; quick 1)"
    )
    parser.add_argument(
        "--redis-restart-every",
        type=float,
        default=None,
        help="seconds between Redis restarts (15, the load runs about a minute; quick 8)",
    )
    parser.add_argument(
        "--malformed-every",
        type=float,
        default=5.0,
        help="seconds between malformed messages pushed onto the queue (0: none)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the chaos loop")
    parser.add_argument(
        "--max-deliveries",
        type=int,
        default=6,
        help="AHP_MAX_DELIVERIES (lost deliveries before Failed; kills here are frequent)",
    )
    parser.add_argument(
        "--deadline", type=float, default=None, help="seconds for all outcomes (1200; quick 300)"
    )
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=180.0,
        help="give up when no outcome arrives for this long while tasks are pending",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 10 sessions x 5 tasks")
    parser.add_argument("--log-dir", type=Path, help="worker logs (default: a new temp dir)")
    args = parser.parse_args(argv)
    if args.workers < 2:
        parser.error("--workers must be at least 2 (one is always kept alive)")
    if args.concurrency is None:
        args.concurrency = 20 if args.pool == "threads" else 2
    if args.sessions is None:
        args.sessions = 10 if args.quick else 50
    if args.tasks_per_session is None:
        args.tasks_per_session = 5 if args.quick else 20
    if args.redis_restarts is None:
        args.redis_restarts = 1 if args.quick else 2
    if args.redis_restart_every is None:
        args.redis_restart_every = 8.0 if args.quick else 15.0
    if args.deadline is None:
        args.deadline = 300.0 if args.quick else 1200.0
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="ahp-soak-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    config = EmbeddedRedisConfig(appendonly=args.redis_restarts > 0)
    with EmbeddedRedis(config) as server:
        console.print(f"redis: embedded Redis 8 at {server.url} (log {server.log_path})")
        return asyncio.run(soak(args, server, log_dir))


if __name__ == "__main__":
    sys.exit(main())
