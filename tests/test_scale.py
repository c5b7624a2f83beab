"""Many runs per worker process, on one event loop: real agent work's shape.

Every worker here is a separate ``celery worker`` OS process of the deployment's layout
(``-P threads -c AHP_WORKER_RUNS``: each delivery parks a pool thread on the process's
one loop). The model (``tests.support.paced_model``) awaits while it streams, like a
remote one, and counts in Redis, where it runs, its calls per task, the calls in flight
per process and when a call saw its cancellation; the tools record their effects there
too. Nothing here is read from the harness's own state.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from typing import Any

import pytest
import redis
from agent_harness_protocol import (
    AgentTask,
    Cancelled,
    Completed,
    MessageDelta,
    MessageRole,
    SessionSpec,
    TaskOutcome,
    TaskRequest,
    TextInput,
)

from harness import CeleryHarness
from tooling.worker_process import WorkerProcess
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings

from .support.controlled_model import SCOPE
from .support.deployments import own_deployment
from .support.keyspace import task_record, terminal_entries
from .support.paced_model import key
from .support.tools import EFFECTS
from .support.waiting import until

# Each test loads a worker process fully and asserts it keeps its leases and its pace:
# no other test may load the machine meanwhile (tests/support/machine.py).
pytestmark = [pytest.mark.processes, pytest.mark.exclusive]

_CHUNK = re.compile(r"(\d+)@\d+ ")
_STREAMED = {MessageRole.ANSWER, MessageRole.UNKNOWN}


def _deployment(redis_url: str, name: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "lease_ttl": timedelta(seconds=2),
        "sweep_interval": timedelta(seconds=0.25),
        # Closing a harness releases every session (its checkpoint thread deleted by a
        # worker): a thousand of them need more than the default 3 s.
        "cleanup_total": timedelta(seconds=60),
        **overrides,
    }
    return own_deployment(redis_url, name, **values)


@contextmanager
def _workers(settings: Settings, *names: str, runs: int) -> Iterator[list[WorkerProcess]]:
    processes = [
        WorkerProcess(settings, concurrency=runs, pool="threads", name=name) for name in names
    ]
    try:
        for process in processes:
            process.start()
        yield processes
    finally:
        for process in processes:
            process.kill()


class _Model:
    """What the paced model recorded for one test's scope (see its module)."""

    def __init__(self, client: redis.Redis, scope: str) -> None:
        self.client = client
        self.scope = scope

    def calls(self) -> dict[str, int]:
        raw = self.client.hgetall(key(self.scope, "calls"))
        return {task: int(count) for task, count in raw.items()}

    def in_flight(self, pid: int) -> int:
        return int(self.client.hget(key(self.scope, "in_flight"), str(pid)) or 0)

    def peak(self, pid: int) -> int:
        return int(self.client.hget(key(self.scope, "peak"), str(pid)) or 0)

    def pids(self) -> dict[str, int]:
        return {t: int(p) for t, p in self.client.hgetall(key(self.scope, "pids")).items()}

    def cancelled(self) -> dict[str, int]:
        return {t: int(ns) for t, ns in self.client.hgetall(key(self.scope, "cancelled")).items()}

    def longest_gap(self, tasks: Sequence[str]) -> float:
        gaps = self.client.zmscore(key(self.scope, "gaps"), list(tasks))
        return max(float(gap or 0.0) for gap in gaps)


def _effects_by_task(client: redis.Redis) -> dict[str, int]:
    counts: dict[str, int] = {}
    for raw in client.lrange(EFFECTS, 0, -1):
        task = str(json.loads(raw).get("task", ""))
        counts[task] = counts.get(task, 0) + 1
    return counts


def _entry_ms(entry_id: str) -> int:
    """The Redis clock (ms) at which a stream entry was appended."""
    return int(entry_id.split("-", 1)[0])


def _terminal_ms(client: redis.Redis, namespace: str, task_id: str) -> int:
    """When the task's terminal entry was appended (its run settled), Redis clock."""
    entries = client.xrange(Keys(namespace).events(task_id))
    return next(_entry_ms(i) for i, fields in entries if fields.get("t") == "terminal")


def _tool_span_ms(client: redis.Redis, namespace: str, task_id: str) -> tuple[int, int]:
    """When the task's tool call was reported started and completed (Redis clock): the
    worker appends the first before it calls the tool and the second once it returned."""
    span: dict[str, int] = {}
    for entry_id, fields in client.xrange(Keys(namespace).events(task_id)):
        if fields.get("t") == "tool":
            span.setdefault(json.loads(fields["d"])["status"], _entry_ms(entry_id))
    return span["started"], span["completed"]


@asynccontextmanager
async def _harness(settings: Settings, scope: str, profile: str) -> AsyncIterator[CeleryHarness]:
    async with CeleryHarness(settings, profile=profile, run_metadata={SCOPE: scope}) as harness:
        yield harness


async def _start(harness: CeleryHarness, count: int, text: str) -> list[AgentTask]:
    """Start ``count`` tasks in sessions of their own, each followed from its start."""

    async def one(index: int) -> AgentTask:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput(f"{text}-{index}")))
        _FOLLOWED[task.id.value] = asyncio.ensure_future(_follow(task))
        return task

    return list(await asyncio.gather(*(one(index) for index in range(count))))


_FOLLOWED: dict[str, asyncio.Future[tuple[TaskOutcome, list[int]]]] = {}
"""Each started task's follower (subscribed to its events the moment it started)."""


async def _results(
    tasks: Sequence[AgentTask], within: float
) -> list[tuple[TaskOutcome, list[int]]]:
    """Each task's outcome and the chunk indices its events carried, in order."""
    followers = [_FOLLOWED.pop(task.id.value) for task in tasks]
    return list(await asyncio.wait_for(asyncio.gather(*followers), within))


async def _follow(task: AgentTask) -> tuple[TaskOutcome, list[int]]:
    """The outcome, and the chunk indices of the message deltas of the task's last run
    (a model offered tools streams deltas whose role is not known yet)."""
    indices: list[int] = []
    async for event in task.events():
        if isinstance(event, MessageDelta) and event.role in _STREAMED:
            found = [int(index) for index in _CHUNK.findall(event.text)]
            if found and found[0] == 0:
                indices = []  # a resumed run streams its answer again, from the start
            indices.extend(found)
    return await task.await_outcome(), indices


async def test_one_worker_process_carries_200_runs_at_once(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """200 tasks in 200 sessions, one worker process: all 200 stream at the same time
    (counted at the model, in that process), every task completes with its 30 chunks in
    order, and no task's model is called twice."""
    settings = _deployment(redis_url, "scale-200", worker_runs=200)
    model = _Model(sync_redis, os.urandom(6).hex())
    with _workers(settings, "scale-200", runs=200) as (worker,):
        async with _harness(settings, model.scope, "paced-long") as harness:
            tasks = await _start(harness, 200, "two-hundred")
            results = await _results(tasks, 120)
        assert worker.pid is not None
        assert model.peak(worker.pid) == 200
    for outcome, indices in results:
        assert isinstance(outcome, Completed), outcome
        assert indices == list(range(30))
    assert sorted(model.calls().values()) == [1] * 200


async def _in_flight_on(model: _Model, worker: WorkerProcess, count: int, what: str) -> None:
    assert worker.pid is not None
    pid = worker.pid
    await until(lambda: model.in_flight(pid) >= count, what, within=60)


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
async def test_50_runs_in_flight_survive_their_worker_stopping_or_dying(
    redis_url: str, sync_redis: redis.Redis, stop: str
) -> None:
    """50 tasks, each past an effect (a tool call) and streaming, all on one worker. SIGTERM
    to that worker's process group hands all 50 back (the worker exits warm, code 0; no
    delivery counted lost) and a second worker completes them; SIGKILL loses them, and
    the second worker's sweeper recovers all 50. Either way: every task completes once
    (one terminal entry), its effect happened once, and it streamed its answer again."""
    settings = _deployment(redis_url, f"scale-{stop}", worker_runs=100)
    model = _Model(sync_redis, os.urandom(6).hex())
    effects_before = _effects_by_task(sync_redis)
    first = WorkerProcess(settings, concurrency=100, pool="threads", name=f"{stop}-first")
    second = WorkerProcess(settings, concurrency=100, pool="threads", name=f"{stop}-second")
    try:
        first.start()
        async with _harness(settings, model.scope, "paced-effect") as harness:
            tasks = await _start(harness, 50, stop)
            await _in_flight_on(model, first, 50, "50 runs streaming on the first worker")
            assert first.pid is not None
            pid = first.pid
            await asyncio.to_thread(second.start)
            assert model.in_flight(pid) == 50, "the streams outlived the second worker's start"
            if stop == "sigterm":
                os.killpg(pid, signal.SIGTERM)
                await until(lambda: not first.running, "the warm shutdown", within=60)
                assert first.returncode == 0, first.log_tail()
            else:
                first.kill()
            results = await _results(tasks, 120)
    finally:
        first.kill()
        second.kill()
    effects = _effects_by_task(sync_redis)
    calls = model.calls()
    for task, (outcome, indices) in zip(tasks, results, strict=True):
        task_id = task.id.value
        assert isinstance(outcome, Completed), outcome
        assert indices == list(range(30))
        assert effects.get(task_id, 0) - effects_before.get(task_id, 0) == 1
        # The tool call, the stream cut short on the first worker, the stream again.
        assert calls[task_id] == 3
        assert terminal_entries(sync_redis, settings.namespace, task_id) == 1
        deliveries = task_record(sync_redis, settings.namespace, task_id)[TaskField.DELIVERIES]
        assert deliveries == ("1" if stop == "sigterm" else "2")


async def test_cancelling_50_of_100_in_flight_runs_reaches_each_model_call(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """100 runs stream on one worker process; 50 of them are cancelled at once. Each of
    the 50 model calls sees its cancellation (recorded where it runs) and its task ends
    Cancelled; the other 50 complete untouched."""
    settings = _deployment(redis_url, "scale-cancel", worker_runs=100)
    model = _Model(sync_redis, os.urandom(6).hex())
    with _workers(settings, "scale-cancel", runs=100) as (worker,):
        async with _harness(settings, model.scope, "paced-long") as harness:
            tasks = await _start(harness, 100, "cancel")
            await _in_flight_on(model, worker, 100, "100 runs streaming")
            doomed, spared = tasks[:50], tasks[50:]
            requested = time.time_ns()
            await asyncio.gather(*(task.request_cancellation() for task in doomed))
            results = await _results(tasks, 120)
    seen = model.cancelled()
    latencies = sorted((seen[task.id.value] - requested) / 1e9 for task in doomed)
    print(
        f"cancellation seen at the model: p50 {latencies[24] * 1000:.0f} ms, "
        f"p95 {latencies[47] * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms"
    )
    for outcome, indices in results[:50]:
        assert isinstance(outcome, Cancelled), outcome
        # Stopped mid-stream: each call saw its cancellation before its last chunk (a
        # cancellation that waited for the 12 s streams to end would stop nothing).
        assert indices != list(range(30)), indices
    for outcome, indices in results[50:]:
        assert isinstance(outcome, Completed), outcome
        assert indices == list(range(30))
    # Seen, not only settled: a cancellation that stopped nothing would leave no stamp.
    assert {task.id.value for task in doomed} <= set(seen)
    assert not {task.id.value for task in spared} & set(seen)
    # How long it takes is measured by bench/latency_throughput.py (e), not bounded here.


async def test_a_blocking_tool_does_not_stall_the_other_runs(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """One run's synchronous tool blocks its thread for 5 s; meanwhile 100 other runs of
    the same worker process stream on, their chunks as evenly spaced as the model sends
    them (0.1 s apart), which they could not be if the tool ran on the process's loop."""
    settings = _deployment(redis_url, "scale-blocking", worker_runs=120)
    model = _Model(sync_redis, os.urandom(6).hex())
    with _workers(settings, "scale-blocking", runs=120):
        async with (
            _harness(settings, model.scope, "paced-blocking") as blocking_harness,
            _harness(settings, model.scope, "paced") as harness,
        ):
            (blocker,) = await _start(blocking_harness, 1, "blocker")
            await until(
                lambda: blocker.id.value in model.calls(), "the blocking tool's call", within=60
            )
            tasks = await _start(harness, 100, "streaming")
            results = await _results(tasks, 60)
            (blocked,) = await _results([blocker], 60)
    assert isinstance(blocked[0], Completed), blocked[0]
    for outcome, indices in results:
        assert isinstance(outcome, Completed), outcome
        assert indices == list(range(20))
    # As the worker recorded them (stream entries, stamped by the Redis clock): the 100 ran
    # while the tool still blocked (it blocks 5 s; they stream 2 s each), each settled
    # before the worker reported the tool's return, and no chunk of theirs waited a fifth
    # of the block as the worker measured it (had the tool blocked the loop, a gap would).
    began_ms, returned_ms = _tool_span_ms(sync_redis, settings.namespace, blocker.id.value)
    settled_ms = [_terminal_ms(sync_redis, settings.namespace, task.id.value) for task in tasks]
    assert max(settled_ms) < returned_ms
    longest_gap = model.longest_gap([task.id.value for task in tasks])
    assert longest_gap < (returned_ms - began_ms) / 1000 / 5
    print(
        f"a tool blocked its thread {(returned_ms - began_ms) / 1000:.2f} s; the 100 runs "
        f"settled within {(max(settled_ms) - began_ms) / 1000:.2f} s of its start, their "
        f"longest chunk gap {longest_gap * 1000:.0f} ms"
    )


async def test_a_worker_saturated_by_1000_runs_loses_no_lease(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """1,000 runs for one worker process, more than its loop can stream at the model's
    pace, with a short lease (2 s: renewed every 0.33 s, lost if not renewed within 1 s).
    Load must never turn into lost leases: every task's model is called exactly once
    (counted at the model), no delivery is counted lost, and every task completes with
    all its chunks."""
    settings = _deployment(redis_url, "scale-saturated", worker_runs=1000)
    model = _Model(sync_redis, os.urandom(6).hex())
    with _workers(settings, "scale-saturated", runs=1000) as (worker,):
        async with _harness(settings, model.scope, "paced") as harness:
            tasks = await _start(harness, 1000, "saturated")
            results = await _results(tasks, 300)
        log = worker.log_tail(100_000)
    calls = model.calls()
    extra = {task: count for task, count in calls.items() if count != 1}
    assert not extra, f"{len(extra)} tasks' models were called more than once"
    assert len(calls) == 1000
    for outcome, indices in results:
        assert isinstance(outcome, Completed), outcome
        assert indices == list(range(20))
    deliveries = {
        task_record(sync_redis, settings.namespace, task.id.value)[TaskField.DELIVERIES]
        for task in tasks
    }
    assert deliveries == {"1"}
    assert "lost its session lease" not in log
