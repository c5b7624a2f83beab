#!/usr/bin/env python
"""What a tool that blocks its thread costs the other runs of its worker process.

    .venv/bin/python bench/blocking_tool.py              # 100 runs beside the blocking tool
    .venv/bin/python bench/blocking_tool.py --runs 200

What runs: an embedded Redis 8 (or ``--redis-url``) and one ``celery worker`` OS process
of the deployment's layout (``threads``: every run of the process on its one event loop,
each delivery parked on a pool thread), profiles of ``bench.blocking_profiles``. One task
calls ``block_thread``, a synchronous tool that blocks its thread for 5 s; once the worker
reported the tool started, ``--runs`` tasks (sessions of their own) start on the same
process, each streaming its answer in 8 pieces 0.25 s apart (2 s).

Read from what the worker appended to the task streams (entry ids: the Redis clock): how
long the tool blocked (its started and completed entries), how soon after the tool began
the runs settled and how many of them before the tool returned, and the longest pause
between two appended pieces of each run (the model spaces them 0.25 s; had the tool
blocked the process's loop, a pause would span the block). ``tests/test_scale.py``
proves the same by order on 100 runs; this reports the figures.

Nothing is asserted about the times; the exit status is 1 when a task did not complete.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis.asyncio as aioredis  # noqa: E402
from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput  # noqa: E402

from bench.blocking_profiles import BLOCK_SECONDS, MODEL_SECONDS  # noqa: E402
from bench.results_page import RESULTS_PAGE, printed_into_section  # noqa: E402
from harness import CeleryHarness  # noqa: E402
from tooling.embedded_redis import EmbeddedRedis  # noqa: E402
from tooling.worker_process import WorkerProcess  # noqa: E402
from wire.keys import Keys  # noqa: E402
from wire.settings import Settings  # noqa: E402


@dataclass
class Result:
    runs: int
    blocked_s: float = 0.0
    """From the tool's started entry to its completed entry."""
    settled_s: list[float] = field(default_factory=list)
    """Each run's terminal entry, from the tool's started entry."""
    before_return: int = 0
    """Runs whose terminal entry came before the tool's completed entry."""
    longest_gaps: list[float] = field(default_factory=list)
    """Each run's longest pause between two appended pieces of its answer."""
    failures: list[str] = field(default_factory=list)


def _ms(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


async def _entries(
    client: aioredis.Redis, namespace: str, task_id: str
) -> list[tuple[int, str, str]]:
    """``(ms, tag, payload)`` of each entry of the task's stream."""
    raw: Any = await client.xrange(Keys(namespace).events(task_id))
    return [(_ms(str(i)), str(f.get("t", "")), str(f.get("d", ""))) for i, f in raw]


async def _tool_started(client: aioredis.Redis, namespace: str, task_id: str) -> None:
    while True:
        for _, tag, payload in await _entries(client, namespace, task_id):
            if tag == "tool" and json.loads(payload)["status"] == "started":
                return
        await asyncio.sleep(0.01)


async def run(redis_url: str, runs: int, log_dir: Path, within: float = 120.0) -> Result:
    tag = uuid4().hex[:8]
    settings = Settings(
        redis_url=redis_url,
        namespace=f"blocking-{tag}",
        queue=f"ahp.blocking.{tag}",
        profiles="bench.blocking_profiles:PROFILES",
        profile="streaming",
        worker_runs=runs + 8,
    )
    result = Result(runs)
    control = aioredis.Redis.from_url(redis_url, decode_responses=True)
    worker = WorkerProcess(settings, log_path=log_dir / "worker.log", name="blocking")
    try:
        await asyncio.to_thread(worker.start)
        async with (
            CeleryHarness(settings, profile="blocking") as blocking,
            CeleryHarness(settings, profile="streaming") as streaming,
        ):
            session = await blocking.create_session(SessionSpec())
            blocker = await session.start_task(TaskRequest(TextInput("block")))
            await asyncio.wait_for(
                _tool_started(control, settings.namespace, blocker.id.value), within
            )

            async def one(index: int) -> tuple[str, object]:
                session = await streaming.create_session(SessionSpec())
                task = await session.start_task(TaskRequest(TextInput(f"stream {index}")))
                return task.id.value, await task.await_outcome()

            outcomes = await asyncio.wait_for(
                asyncio.gather(*(one(i) for i in range(runs))), within
            )
            blocked = await asyncio.wait_for(blocker.await_outcome(), within)
        for task_id, outcome in [*outcomes, (blocker.id.value, blocked)]:
            if not isinstance(outcome, Completed):
                result.failures.append(f"task {task_id}: {type(outcome).__name__}")
        spans: dict[str, int] = {}
        for ms, tag_, payload in await _entries(control, settings.namespace, blocker.id.value):
            if tag_ == "tool":
                spans.setdefault(json.loads(payload)["status"], ms)
        began, returned = spans["started"], spans["completed"]
        result.blocked_s = (returned - began) / 1000
        for task_id, _ in outcomes:
            entries = await _entries(control, settings.namespace, task_id)
            pieces = [ms for ms, tag_, _ in entries if tag_ == "delta"]
            settled = next(ms for ms, tag_, _ in entries if tag_ == "terminal")
            result.settled_s.append((settled - began) / 1000)
            result.before_return += settled < returned
            gaps = [later - earlier for earlier, later in pairwise(pieces)]
            result.longest_gaps.append(max(gaps, default=0) / 1000)
    finally:
        worker.kill()
        await control.aclose()
    return result


def report(result: Result) -> list[str]:
    settled, gaps = result.settled_s, result.longest_gaps
    return [
        f"1 worker process (threads); a tool blocking its thread {BLOCK_SECONDS:g} s, "
        f"{result.runs} runs streaming {MODEL_SECONDS:g} s each (8 pieces, 0.25 s apart) "
        "beside it; Redis clock",
        f"  the tool blocked:                     {result.blocked_s:.2f} s",
        f"  runs settled before it returned:      {result.before_return}/{result.runs}",
        f"  runs settled after its start:         p50 {statistics.median(settled):.2f} s, "
        f"max {max(settled):.2f} s",
        f"  longest pause between pieces per run: p50 {statistics.median(gaps) * 1000:.0f} ms, "
        f"max {max(gaps) * 1000:.0f} ms",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=100, help="runs beside the blocking tool")
    parser.add_argument("--redis-url", help="a Redis 8 (search+JSON) instead of an embedded one")
    parser.add_argument("--results-page", type=Path, default=RESULTS_PAGE)
    parser.add_argument("--no-results-page", action="store_true")
    args = parser.parse_args(argv)
    page = None if args.no_results_page else args.results_page
    log_dir = Path(tempfile.mkdtemp(prefix="bench-blocking-"))
    given = list(argv if argv is not None else sys.argv[1:])
    with printed_into_section("blocking_tool.py", given, page):
        if args.redis_url:
            result = asyncio.run(run(args.redis_url, args.runs, log_dir))
        else:
            with EmbeddedRedis() as server:
                result = asyncio.run(run(server.url, args.runs, log_dir))
        print("\n".join(report(result)))
        for failure in result.failures:
            print(f"FAILURE: {failure}")
    print(f"worker log: {log_dir}", file=sys.stderr)
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
