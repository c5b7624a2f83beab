#!/usr/bin/env python
"""How long tenant B's start waits while tenant A has a burst queued (docs/tenants.md).

    .venv/bin/python bench/fairness.py                  # 3 runs, a burst of 2,000
    .venv/bin/python bench/fairness.py --runs 5 --burst 1000 --slots 16

What runs: an embedded Redis 8 (or ``--redis-url``); per scenario a deployment of its own
served by one ``celery worker`` OS process (``tooling.worker_process.WorkerProcess``,
the ``threads`` layout) with ``--slots`` run slots; one ``harness.CeleryHarness`` in this
process starting one-task runs as tenants would through the API (``harness.runs``). Every
model call streams for 0.2 s (``bench.fairness_profiles``).

Each run starts A's burst (``--burst`` tasks, 100 at a time), waits until A keeps the
pool busy, then starts one task of tenant B, and waits until every task settled. B's
*start delay* is its record's first claim minus its start (both stamped by the scripts on
the Redis clock). Scenarios, side by side in the same run:

 (a) no burst: B alone (the floor);
 (b) A's burst with A's ``running`` limit at the pool's slots, B's too;
 (c) A's burst with no limits (what a FIFO queue does: B behind A's backlog).

Also reported: how long A's burst took to drain, in (b) and (c) (the limit's cost to the
busy tenant's throughput, if any). Nothing is asserted about the times; exit status 1
when a task did not complete or one ran twice.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis.asyncio as aioredis  # noqa: E402
from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput  # noqa: E402

from bench.cli_frame import main_into_section, redis_url, reported  # noqa: E402
from bench.fairness_profiles import MODEL_SECONDS  # noqa: E402
from bench.results_page import RESULTS_PAGE  # noqa: E402
from harness import CeleryHarness, CeleryTask, TenantLimits  # noqa: E402
from harness.runs import start_run  # noqa: E402
from tooling.worker_process import WorkerProcess  # noqa: E402
from wire.keys import Keys  # noqa: E402
from wire.records import TaskField  # noqa: E402
from wire.settings import Settings  # noqa: E402


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    burst: bool
    limited: bool


SCENARIOS = (
    Scenario("a", "no burst: B alone", burst=False, limited=False),
    Scenario("b", "A's burst, running limit = slots", burst=True, limited=True),
    Scenario("c", "A's burst, no limits (FIFO)", burst=True, limited=False),
)


@dataclass
class Result:
    scenario: Scenario
    delays: list[float] = field(default_factory=list)
    """B's start delays (s)."""
    drains: list[float] = field(default_factory=list)
    """Seconds from A's first start to A's last settle."""
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    runs: int = 3
    burst: int = 2_000
    slots: int = 16


async def _start(
    harness: CeleryHarness, tenant: str, limits: TenantLimits | None, text: str
) -> CeleryTask:
    started = await start_run(
        harness, SessionSpec(), TaskRequest(TextInput(text)), tenant=tenant, limits=limits
    )
    return started.task


async def _claimed(client: aioredis.Redis, keys: Keys, task_id: str) -> float:
    """Seconds from the task's start to its first claim (Redis clock)."""
    created, claimed = await client.hmget(
        keys.task(task_id), [TaskField.CREATED_MS, TaskField.CLAIMED_MS]
    )
    return (int(str(claimed)) - int(str(created))) / 1000


async def run_once(
    harness: CeleryHarness,
    client: aioredis.Redis,
    keys: Keys,
    scenario: Scenario,
    plan: Plan,
    result: Result,
) -> None:
    limits = TenantLimits(running=plan.slots) if scenario.limited else None
    tenant_a, tenant_b = f"a-{uuid4().hex[:6]}", f"b-{uuid4().hex[:6]}"
    burst: list[CeleryTask] = []
    began = time.monotonic()
    if scenario.burst:
        for first in range(0, plan.burst, 100):
            count = min(100, plan.burst - first)
            burst += await asyncio.gather(
                *(_start(harness, tenant_a, limits, f"a {n}") for n in range(first, first + count))
            )
        # A keeps the pool busy (a slot's worth of runs done): B arrives mid-burst.
        await asyncio.sleep(2 * MODEL_SECONDS)
    b_task = await _start(harness, tenant_b, limits, "b")
    outcomes = [await b_task.await_outcome()] + [await task.await_outcome() for task in burst]
    if burst:
        result.drains.append(time.monotonic() - began)
    result.delays.append(await _claimed(client, keys, b_task.id.value))
    for task, outcome in zip([b_task, *burst], outcomes, strict=True):
        if not isinstance(outcome, Completed):
            result.failures.append(f"{scenario.key}: task {task.id} ended {outcome!r}")
        deliveries = str(await client.hget(keys.task(task.id.value), TaskField.DELIVERIES))
        if deliveries != "1":
            result.failures.append(f"{scenario.key}: task {task.id} ran {deliveries} times")


async def run_scenario(redis_url: str, scenario: Scenario, plan: Plan, log_dir: Path) -> Result:
    settings = Settings(
        redis_url=redis_url,
        namespace=f"fair-{scenario.key}-{uuid4().hex[:6]}",
        queue=f"fair.{scenario.key}.{uuid4().hex[:6]}",
        profiles="bench.fairness_profiles:PROFILES",
        profile="fair",
    )
    worker = WorkerProcess(
        settings,
        concurrency=plan.slots,
        log_path=log_dir / f"{settings.namespace}.log",
        name="fairness",
        loglevel="warning",
    )
    result = Result(scenario)
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        await asyncio.to_thread(worker.start)
        async with CeleryHarness(settings) as harness:
            for _ in range(plan.runs):
                await run_once(harness, client, Keys(settings.namespace), scenario, plan, result)
    finally:
        worker.kill()
        await client.aclose()
    return result


def _seconds(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"p50 {statistics.median(values):.3f} s, max {max(values):.3f} s"


def report(results: Sequence[Result], plan: Plan) -> list[str]:
    lines = [
        f"burst {plan.burst} tasks of tenant A, {plan.slots} run slots (one worker process), "
        f"every model call {MODEL_SECONDS:g} s, {plan.runs} runs per scenario",
        "",
        "| scenario | B's start delay | A's burst drained in |",
        "|---|---|---|",
    ]
    for result in results:
        lines.append(
            f"| ({result.scenario.key}) {result.scenario.label} | {_seconds(result.delays)} "
            f"| {_seconds(result.drains)} |"
        )
    by_key = {result.scenario.key: result for result in results}
    floor = statistics.median(by_key["a"].delays) if "a" in by_key else None
    fair = statistics.median(by_key["b"].delays) if "b" in by_key else None
    fifo = statistics.median(by_key["c"].delays) if "c" in by_key else None
    lines.append("")
    if floor and fair:
        lines.append(f"B's delay with A's burst, limited / alone: {fair / floor:.1f}x")
    if fair and fifo:
        lines.append(f"B's delay with A's burst, FIFO / limited: {fifo / fair:.1f}x")
    if "b" in by_key and "c" in by_key and by_key["b"].drains and by_key["c"].drains:
        ratio = statistics.median(by_key["b"].drains) / statistics.median(by_key["c"].drains)
        lines.append(f"A's drain time, limited / FIFO: {ratio:.2f}")
    return lines


async def run(redis_url: str, plan: Plan, log_dir: Path) -> tuple[list[Result], list[str]]:
    results = [await run_scenario(redis_url, scenario, plan, log_dir) for scenario in SCENARIOS]
    return results, report(results, plan)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=Plan.runs, help="runs per scenario")
    parser.add_argument("--burst", type=int, default=Plan.burst, help="tasks of tenant A")
    parser.add_argument("--slots", type=int, default=Plan.slots, help="the worker's run slots")
    parser.add_argument("--redis-url", help="a Redis 8 (search+JSON) instead of an embedded one")
    parser.add_argument("--log-dir", type=Path, help="worker logs (default: a new temp dir)")
    parser.add_argument("--results-page", type=Path, default=RESULTS_PAGE)
    parser.add_argument("--no-results-page", action="store_true")
    return parser.parse_args(argv)


def measure(args: argparse.Namespace) -> int:
    plan = Plan(runs=args.runs, burst=args.burst, slots=args.slots)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="bench-fairness-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    with redis_url(args.redis_url) as url:
        results, lines = asyncio.run(run(url, plan, log_dir))
    return reported(lines, [failure for result in results for failure in result.failures], log_dir)


def main(argv: Sequence[str] | None = None) -> int:
    return main_into_section("fairness.py", argv, parse, measure)


if __name__ == "__main__":
    sys.exit(main())
