#!/usr/bin/env python
"""Redis storage of one persistent session over many turns: linear, not quadratic.

    python bench/storage_growth.py [--quick] [--turns 100,200] [--redis-url URL]
                                   [--checkpoints-kept K]

For each N in ``--turns`` (full: 100 and 200; ``--quick``: 20 and 40), one persistent
session of the ``scripted`` profile runs N turns with 1 KB inputs through a real worker
process (``celery -A workers.main worker``) on an embedded Redis 8 (or ``--redis-url``).
After every tenth of the turns the bench measures, in Redis itself:

* ``thread``: ``MEMORY USAGE`` summed over the session's checkpoint keys
  (``checkpoint:``, ``checkpoint_write:``, ``write_keys_zset:``, ``checkpoint_latest:``)
  and its session keys (record, fence, handles);
* ``tasks``: the same over its task records and event streams (kept for
  ``AHP_TASK_RETENTION``, then expired; reported apart);
* ``conversation``: the UTF-8 bytes of every input and answer so far;
* ``used_memory`` growth since before the session (``INFO memory``; includes the search
  indexes and allocator overhead).

It prints bytes added per turn in each tenth, the ratio thread/conversation, and the
growth of the per-turn increment (last tenth / first tenth): about 1 for linear storage,
about ``2N/(N/10)`` for quadratic. ``--checkpoints-kept 1000000`` shows the unpruned
(quadratic) behaviour for comparison. Nothing is asserted; the "verdict" line reports
whether the thread stays within 5 times the conversation plus 64 KB.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import string
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from agent_harness_protocol import (  # noqa: E402
    Completed,
    PersistenceRequirement,
    SessionRequirements,
    SessionSpec,
    TaskRequest,
    TextInput,
    TextOutput,
)

from bench.results_page import RESULTS_PAGE, printed_into_section  # noqa: E402
from harness import CeleryHarness, Settings  # noqa: E402
from tooling.embedded_redis import EmbeddedRedis  # noqa: E402
from tooling.worker_process import WorkerProcess  # noqa: E402
from wire.keys import Keys  # noqa: E402

INPUT_BYTES = 1024
SPEC = SessionSpec(requirements=SessionRequirements(persistence=PersistenceRequirement()))
CHECKPOINT_PATTERNS = ("checkpoint:{t}:*", "checkpoint_write:{t}:*", "write_keys_zset:{t}:*")
SLACK_FACTOR = 5
SLACK_CONSTANT = 64 * 1024


@dataclass(frozen=True)
class Sample:
    turn: int
    thread: int
    tasks: int
    conversation: int
    used_memory: int


def _input(turn: int, rng: random.Random) -> str:
    head = f"turn {turn}: "
    body = "".join(rng.choices(string.ascii_letters + " ", k=INPUT_BYTES - len(head)))
    return head + body


def _usage(client: redis.Redis, keys: list[str]) -> int:
    total = 0
    for key in keys:
        size = client.memory_usage(key, samples=0)
        total += int(size or 0)
    return total


def _thread_keys(client: redis.Redis, keys: Keys, session_id: str) -> list[str]:
    thread = keys.thread_id(session_id)
    found: list[str] = []
    for pattern in CHECKPOINT_PATTERNS:
        found += [str(key) for key in client.scan_iter(match=pattern.format(t=thread), count=1000)]
    found += [
        key
        for key in (
            keys.checkpoint_latest(session_id),
            keys.session(session_id),
            keys.fence(session_id),
            keys.handles(session_id),
        )
        if client.exists(key)
    ]
    return found


def _task_keys(client: redis.Redis, keys: Keys, task_ids: list[str]) -> list[str]:
    names = [keys.task(task_id) for task_id in task_ids] + [keys.events(t) for t in task_ids]
    return [name for name in names if client.exists(name)]


def _used_memory(client: redis.Redis) -> int:
    info = client.info("memory")
    return int(info["used_memory"])


async def run_session(
    settings: Settings, client: redis.Redis, turns: int
) -> tuple[list[Sample], list[float]]:
    keys = Keys(settings.namespace)
    rng = random.Random(turns)
    baseline = _used_memory(client)
    samples: list[Sample] = []
    conversation = 0
    task_ids: list[str] = []
    latencies: list[float] = []
    step = max(turns // 10, 1)
    async with CeleryHarness(settings, profile="scripted") as harness:
        session = await harness.create_session(SPEC)
        sid = session.id.value
        for turn in range(1, turns + 1):
            text = _input(turn, rng)
            began = time.perf_counter()
            task = await session.start_task(TaskRequest(TextInput(text)))
            outcome = await task.await_outcome()
            latencies.append(time.perf_counter() - began)
            if not isinstance(outcome, Completed) or not isinstance(outcome.output, TextOutput):
                raise RuntimeError(f"turn {turn} ended {outcome!r}")
            task_ids.append(task.id.value)
            conversation += len(text.encode()) + len(outcome.output.text.encode())
            if turn % step == 0 or turn == turns:
                samples.append(
                    Sample(
                        turn,
                        _usage(client, _thread_keys(client, keys, sid)),
                        _usage(client, _task_keys(client, keys, task_ids)),
                        conversation,
                        _used_memory(client) - baseline,
                    )
                )
        await session.release()
    return samples, latencies


def report(turns: int, kept: int, samples: list[Sample], latencies: list[float]) -> None:
    tenth = max(len(latencies) // 10, 1)
    first = statistics.median(latencies[:tenth]) * 1000
    last_tenth = statistics.median(latencies[-tenth:]) * 1000
    print(
        f"\n== {turns} turns, {INPUT_BYTES} B inputs, checkpoints kept: {kept}; "
        f"turn latency median first/last tenth: {first:.1f}/{last_tenth:.1f} ms"
    )
    print(
        f"{'turn':>5} {'thread B':>11} {'B/turn':>9} {'thread/conv':>11} "
        f"{'tasks B':>10} {'conv B':>10} {'used_memory +B':>15}"
    )
    previous = Sample(0, 0, 0, 0, 0)
    increments: list[float] = []
    for sample in samples:
        per_turn = (sample.thread - previous.thread) / max(sample.turn - previous.turn, 1)
        increments.append(per_turn)
        ratio = sample.thread / sample.conversation if sample.conversation else 0.0
        print(
            f"{sample.turn:>5} {sample.thread:>11,} {per_turn:>9,.0f} {ratio:>11.2f} "
            f"{sample.tasks:>10,} {sample.conversation:>10,} {sample.used_memory:>15,}"
        )
        previous = sample
    last = samples[-1]
    # The first tenth holds the per-session constant; compare the second and the last.
    base = increments[1] if len(increments) > 2 else increments[0]
    growth = increments[-1] / base if base > 0 else float("inf")
    print(
        f"thread: {last.thread:,} B = {last.thread / last.turn:,.0f} B per turn, "
        f"{last.thread / last.conversation:.2f}x the conversation ({last.conversation:,} B); "
        f"per-turn increment last/second tenth: {growth:.2f}"
    )
    within = last.thread <= SLACK_FACTOR * last.conversation + SLACK_CONSTANT
    print(
        f"verdict: thread {'within' if within else 'OVER'} {SLACK_FACTOR}x conversation + "
        f"{SLACK_CONSTANT // 1024} KB"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--quick", action="store_true", help="20 and 40 turns")
    parser.add_argument("--turns", help="comma-separated session lengths (default 100,200)")
    parser.add_argument("--redis-url", help="a Redis 8 to use instead of an embedded one")
    parser.add_argument("--checkpoints-kept", type=int, default=None)
    parser.add_argument("--results-page", type=Path, default=RESULTS_PAGE)
    parser.add_argument("--no-results-page", action="store_true")
    args = parser.parse_args()
    page = None if args.no_results_page else args.results_page
    with printed_into_section("storage_growth.py", sys.argv[1:], page):
        await measure(args)


async def measure(args: argparse.Namespace) -> None:
    if args.turns:
        lengths = [int(item) for item in args.turns.split(",")]
    else:
        lengths = [20, 40] if args.quick else [100, 200]
    server: EmbeddedRedis | None = None
    url = args.redis_url
    if url is None:
        server = EmbeddedRedis()
        server.start()
        url = server.url
    try:
        suffix = uuid4().hex[:8]
        base = Settings(
            redis_url=url,
            namespace=f"bench-storage-{suffix}",
            queue=f"bench.storage.{suffix}",
            profiles="wire.default_profiles:PROFILES",
            profile="scripted",
            lease_ttl=timedelta(seconds=6),
        )
        settings = (
            base
            if args.checkpoints_kept is None
            else base.model_copy(update={"checkpoints_kept": args.checkpoints_kept})
        )
        client = redis.Redis.from_url(url, decode_responses=True)
        version = client.info("server")["redis_version"]
        print(f"storage growth of one persistent session; Redis {version}")
        with WorkerProcess(settings, concurrency=1, name="bench-storage"):
            for turns in lengths:
                samples, latencies = await run_session(settings, client, turns)
                report(turns, settings.checkpoints_kept, samples, latencies)
        client.close()
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
