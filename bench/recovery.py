#!/usr/bin/env python
"""How soon a task recovers when its worker process dies or stops mid-run.

    .venv/bin/python bench/recovery.py                 # 5 runs of each scenario
    .venv/bin/python bench/recovery.py --runs 10 --lease-ttl 3 --sweep-interval 0.5

What runs: an embedded Redis 8 (or ``--redis-url``); per scenario a deployment of its own
(namespace and queue) served by two ``celery worker`` OS processes
(``tooling.worker_process.WorkerProcess``, the deployment's ``threads`` layout); one
``harness.CeleryHarness`` in this process. The model is the soak's self-recording one
(``bench.soak_model``, profile ``recovery`` of ``bench.recovery_profiles``): every call
streams for 2 s and puts its start, pid and process group on record in Redis first.

Each run is a fresh session and one task. Once its model call is on record, the worker
running it gets a signal (its whole process group, like a lost machine or a ``systemctl
stop``), and the times are measured from just before the signal, all on the Redis clock
(``TIME``; the claim and settle scripts stamp the same clock):

 (a) SIGKILL, ``AHP_ON_WORKER_LOSS=resume``: to the resumed claim on the other worker
     (the lease lapses, a sweep publishes the task again, a worker claims it), to its
     ``Completed`` outcome settled (the 2 s model call runs again in between), and to the
     outcome reaching the caller;
 (b) SIGKILL, ``unresolved``: to the ``Unresolved`` outcome a sweeper settles;
 (c) SIGKILL, ``resume`` with ``AHP_MAX_DELIVERIES=1``: to the ``Failed`` outcome of the
     claim that finds the deliveries used up;
 (d) SIGTERM, ``resume``: the run hands its lease back and its message is requeued; to
     the copy's claim on the other worker, and to its ``Completed`` outcome.

Between runs the signalled worker is replaced (outside the measured time). Each scenario
reports p50 and max of each interval over its runs. (a)-(c) wait for the lease to lapse,
so they scale with ``--lease-ttl`` and ``--sweep-interval`` (the deployment's defaults,
6 s and 1 s, unless given); (d) waits for neither.

Nothing is asserted about the times. Exit status 1 when a run's outcome is not the
scenario's, its task did not resume on the other worker (or ran again when it must not),
or the signal landed after the model call had ended (the run then proves nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis.asyncio as aioredis  # noqa: E402
from agent_harness_protocol import (  # noqa: E402
    Completed,
    Failed,
    SessionSpec,
    TaskOutcome,
    TaskRequest,
    TextInput,
    Unresolved,
)

from bench.cli_frame import main_into_section, redis_url, reported  # noqa: E402
from bench.recovery_profiles import MODEL_SECONDS  # noqa: E402
from bench.results_page import RESULTS_PAGE  # noqa: E402
from bench.soak import Call, read_calls, redis_time_us  # noqa: E402
from harness import CeleryHarness  # noqa: E402
from tooling.worker_process import WorkerProcess  # noqa: E402
from wire.keys import Keys  # noqa: E402
from wire.records import TaskField  # noqa: E402
from wire.settings import Settings, WorkerLossPolicy  # noqa: E402


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    signal: signal.Signals
    changes: dict[str, Any]
    """Settings of its deployment, beside the plan's lease and sweep."""
    expected: type[TaskOutcome]
    resumes: bool
    """The task runs again on the other worker (its claim is timed)."""
    deliveries: str
    """The task record's ``deliveries`` at the end."""


SCENARIOS = (
    Scenario(
        "a",
        "SIGKILL, on_worker_loss=resume",
        signal.SIGKILL,
        {"on_worker_loss": WorkerLossPolicy.RESUME, "max_deliveries": 3},
        Completed,
        True,
        "2",
    ),
    Scenario(
        "b",
        "SIGKILL, on_worker_loss=unresolved",
        signal.SIGKILL,
        {"on_worker_loss": WorkerLossPolicy.UNRESOLVED},
        Unresolved,
        False,
        "1",
    ),
    Scenario(
        "c",
        "SIGKILL, on_worker_loss=resume, max_deliveries=1",
        signal.SIGKILL,
        {"on_worker_loss": WorkerLossPolicy.RESUME, "max_deliveries": 1},
        Failed,
        False,
        "1",
    ),
    Scenario(
        "d",
        "SIGTERM (hand-back), on_worker_loss=resume",
        signal.SIGTERM,
        {"on_worker_loss": WorkerLossPolicy.RESUME, "max_deliveries": 3},
        Completed,
        True,
        "1",
    ),
)


@dataclass(frozen=True)
class Plan:
    runs: int = 5
    lease_ttl: timedelta = timedelta(seconds=6)
    sweep_interval: timedelta = timedelta(seconds=1)
    only: tuple[str, ...] = tuple(scenario.key for scenario in SCENARIOS)
    run_timeout: float = 120.0


@dataclass
class Result:
    scenario: Scenario
    claims: list[float] = field(default_factory=list)
    """Seconds from the signal to the claim that resumed the task (``resumes`` only)."""
    settles: list[float] = field(default_factory=list)
    """Seconds from the signal to the outcome settled in the task record."""
    at_caller: list[float] = field(default_factory=list)
    """Seconds from the signal to the outcome returned to the caller."""
    outcomes: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


class Workers:
    """The two worker processes of a scenario's deployment; a signalled one is replaced."""

    def __init__(self, settings: Settings, log_dir: Path, size: int = 2) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.all: list[WorkerProcess] = []
        self.live = [self._new() for _ in range(size)]

    def _new(self) -> WorkerProcess:
        worker = WorkerProcess(
            self.settings,
            concurrency=4,
            log_path=self.log_dir / f"{self.settings.namespace}-{len(self.all) + 1}.log",
            name="recovery",
        )
        self.all.append(worker)
        return worker

    async def start(self) -> None:
        await asyncio.gather(*(asyncio.to_thread(worker.start) for worker in self.live))

    def owner(self, pgid: int) -> WorkerProcess:
        return next(worker for worker in self.live if worker.pid == pgid)

    async def replace(self, worker: WorkerProcess, within: float = 60.0) -> None:
        """A fresh worker for ``worker``, once it is gone (a SIGTERM's warm shutdown ends
        by itself; it is killed if it has not within ``within`` seconds)."""
        for _ in range(int(within / 0.05)):
            if not worker.running:
                break
            await asyncio.sleep(0.05)
        worker.kill()
        self.live.remove(worker)
        fresh = self._new()
        await asyncio.to_thread(fresh.start)
        self.live.append(fresh)

    def stop(self) -> None:
        for worker in self.all:
            worker.kill()


async def _call_of(control: aioredis.Redis, namespace: str, task_id: str) -> Call:
    """The task's first model call, once it is on record."""
    while True:
        calls = [call for call in await read_calls(control, namespace) if call.task == task_id]
        if calls:
            return calls[0]
        await asyncio.sleep(0.005)


async def _run_once(
    scenario: Scenario,
    index: int,
    harness: CeleryHarness,
    workers: Workers,
    control: aioredis.Redis,
    result: Result,
    within: float,
) -> WorkerProcess:
    """One run: start, signal the worker running it, time the recovery. Returns the
    signalled worker."""
    namespace = workers.settings.namespace
    session = await harness.create_session(SessionSpec())
    task = await session.start_task(TaskRequest(TextInput(f"recovery {scenario.key}{index}")))
    task_id = task.id.value
    first = await asyncio.wait_for(_call_of(control, namespace, task_id), within)
    victim = workers.owner(first.pgid)
    signalled_us = await redis_time_us(control)
    if scenario.signal is signal.SIGKILL:
        await asyncio.to_thread(victim.kill)
    else:
        os.killpg(first.pgid, scenario.signal)
    outcome = await asyncio.wait_for(task.await_outcome(), within)
    returned_us = await redis_time_us(control)
    stored = await control.hgetall(Keys(namespace).task(task_id))
    record = {str(key): str(value) for key, value in stored.items()}
    calls = [call for call in await read_calls(control, namespace) if call.task == task_id]
    name = type(outcome).__name__
    result.outcomes[name] = result.outcomes.get(name, 0) + 1
    run = f"({scenario.key}) run {index + 1}"
    ended_us = calls[0].end_us
    if ended_us is not None and ended_us < signalled_us:
        result.failures.append(f"{run}: the model call had ended before the signal")
    if not isinstance(outcome, scenario.expected):
        result.failures.append(f"{run}: {name} instead of {scenario.expected.__name__}")
    if record.get(TaskField.DELIVERIES) != scenario.deliveries:
        result.failures.append(f"{run}: deliveries {record.get(TaskField.DELIVERIES)}")
    if scenario.resumes and not (len(calls) == 2 and calls[1].pgid != first.pgid):
        result.failures.append(f"{run}: did not run again once, on the other worker")
    if not scenario.resumes and len(calls) != 1:
        result.failures.append(f"{run}: its model was called {len(calls)} times")
    signalled_ms = signalled_us / 1000
    if scenario.resumes:
        result.claims.append((int(record[TaskField.CLAIMED_MS]) - signalled_ms) / 1000)
    result.settles.append((int(record[TaskField.SETTLED_MS]) - signalled_ms) / 1000)
    result.at_caller.append((returned_us - signalled_us) / 1e6)
    await session.release()
    return victim


async def run_scenario(
    scenario: Scenario, redis_url: str, plan: Plan, log_dir: Path, control: aioredis.Redis
) -> Result:
    tag = uuid4().hex[:8]
    settings = Settings(
        redis_url=redis_url,
        namespace=f"recovery-{scenario.key}-{tag}",
        queue=f"ahp.recovery.{scenario.key}.{tag}",
        profiles="bench.recovery_profiles:PROFILES",
        profile="recovery",
        lease_ttl=plan.lease_ttl,
        sweep_interval=plan.sweep_interval,
        **scenario.changes,
    )
    result = Result(scenario)
    workers = Workers(settings, log_dir)
    try:
        await workers.start()
        async with CeleryHarness(settings, profile="recovery") as harness:
            for index in range(plan.runs):
                try:
                    victim = await _run_once(
                        scenario, index, harness, workers, control, result, plan.run_timeout
                    )
                except Exception as error:  # a run that broke down is a failure, not a crash
                    result.failures.append(
                        f"({scenario.key}) run {index + 1}: {type(error).__name__}: {error}"
                    )
                    break
                if index + 1 < plan.runs:
                    await workers.replace(victim)
    finally:
        workers.stop()
    return result


def _figure(label: str, values: list[float]) -> str:
    if not values:
        return f"    signal -> {label:<26} not measured"
    return (
        f"    signal -> {label:<26} p50 {statistics.median(values):6.2f} s   "
        f"max {max(values):6.2f} s   ({len(values)} runs)"
    )


def report(results: Sequence[Result], plan: Plan) -> list[str]:
    lines = [
        f"lease_ttl {plan.lease_ttl.total_seconds():g} s, sweep_interval "
        f"{plan.sweep_interval.total_seconds():g} s, model call {MODEL_SECONDS:g} s; "
        f"{plan.runs} runs per scenario, 2 worker processes (threads) each; Redis clock",
    ]
    for result in results:
        scenario = result.scenario
        outcomes = ", ".join(f"{count} {name}" for name, count in sorted(result.outcomes.items()))
        lines.append(f"({scenario.key}) {scenario.label}: {outcomes or 'no outcome'}")
        if scenario.resumes:
            lines.append(_figure("claim on the other worker", result.claims))
        lines.append(_figure(f"{scenario.expected.__name__} settled", result.settles))
        lines.append(_figure("outcome at the caller", result.at_caller))
    return lines


async def run(redis_url: str, plan: Plan, log_dir: Path) -> tuple[list[Result], list[str]]:
    """Every scenario of ``plan``, one after another; the results and the report lines."""
    control = aioredis.Redis.from_url(redis_url, decode_responses=True)
    results: list[Result] = []
    try:
        for scenario in SCENARIOS:
            if scenario.key in plan.only:
                results.append(await run_scenario(scenario, redis_url, plan, log_dir, control))
    finally:
        await control.aclose()
    return results, report(results, plan)


def failures(results: Sequence[Result]) -> list[str]:
    return [failure for result in results for failure in result.failures]


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=Plan.runs, help="runs per scenario")
    parser.add_argument(
        "--lease-ttl", type=float, default=6.0, help="AHP_LEASE_TTL in seconds (default 6)"
    )
    parser.add_argument(
        "--sweep-interval", type=float, default=1.0, help="AHP_SWEEP_INTERVAL (default 1)"
    )
    parser.add_argument(
        "--only", default="a,b,c,d", help="the scenarios to run, comma separated letters"
    )
    parser.add_argument("--redis-url", help="a Redis 8 (search+JSON) instead of an embedded one")
    parser.add_argument("--log-dir", type=Path, help="worker logs (default: a new temp dir)")
    parser.add_argument("--results-page", type=Path, default=RESULTS_PAGE)
    parser.add_argument("--no-results-page", action="store_true")
    return parser.parse_args(argv)


def measure(args: argparse.Namespace) -> int:
    only = tuple(part.strip() for part in args.only.split(",") if part.strip())
    plan = Plan(
        runs=args.runs,
        lease_ttl=timedelta(seconds=args.lease_ttl),
        sweep_interval=timedelta(seconds=args.sweep_interval),
        only=only,
    )
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    with redis_url(args.redis_url) as url:
        results, lines = asyncio.run(run(url, plan, log_dir))
    return reported(lines, failures(results), log_dir)


def main(argv: Sequence[str] | None = None) -> int:
    return main_into_section("recovery.py", argv, parse, measure)


if __name__ == "__main__":
    sys.exit(main())
