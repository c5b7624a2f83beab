"""Scenario (f) of ``bench/latency_throughput.py``: the floors under the CPU per task and
under the event latency.

The same graph turn every system of the benchmark runs, measured bare in this process:
langchain's ``create_agent`` with the benchmark's scripted model and no middleware, its
sessions run concurrently as in scenario (c), once without a checkpointer and once on
the upstream ``AsyncRedisSaver`` (the reference's saver) against the run's Redis. The CPU
of this process and of the embedded Redis per task is what any harness built on that
graph and that saver spends at least, before its own work (a broker hop, leases, events,
a caller): the floor scenario (c)'s CPU target is measured against. Every answer is
checked for the scripted reply.

The event latency's floor is the transport alone: another Python process appends entries
stamped with ``time.time_ns()`` to a stream (``XADD`` through ``redis.asyncio``, one every
5 ms, as scenario (d)'s model streams), and this process blocks in ``XREAD`` and
subtracts the stamp on receipt, as the harness's reader does. What scenario (d) measures
above it is the model's streaming stack, the worker's event encoding and fenced append
script, and the caller's decoding.

    python -m bench.floors xadd <redis url> <stream key> <count> <interval seconds>

is the writer (started by :func:`event_transport_floor`).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.redis.aio import AsyncRedisSaver

from workers.scripted_model import ScriptedChatModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REPLY_PREFIX = "[scripted model]"


@dataclass(frozen=True)
class FloorResult:
    label: str
    tasks: int
    ok: int
    seconds: float
    cpu_seconds: float  # this process and the embedded Redis

    @property
    def per_second(self) -> float:
        return self.tasks / self.seconds if self.seconds > 0 else float("nan")

    @property
    def cpu_ms_per_task(self) -> float:
        return self.cpu_seconds * 1000 / self.ok if self.ok else float("nan")

    @property
    def clean(self) -> bool:
        return self.ok == self.tasks


async def _sessions(graph: Any, tag: str, sessions: int, turns: int) -> int:
    """Run ``sessions`` threads of ``turns`` sequential turns concurrently; the number of
    turns answered with the scripted reply."""
    ok = 0

    async def chain(index: int) -> None:
        nonlocal ok
        config = {"configurable": {"thread_id": f"floor-{tag}-{index}"}}
        for turn in range(1, turns + 1):
            state = await graph.ainvoke({"messages": [HumanMessage(f"question {turn}")]}, config)
            last = state["messages"][-1]
            if isinstance(last, AIMessage) and last.text.startswith(REPLY_PREFIX):
                ok += 1

    await asyncio.gather(*(chain(index) for index in range(sessions)))
    return ok


async def measure_floors(
    redis_url: str,
    instructions: str,
    sessions: int,
    turns: int,
    cpu_of: Callable[[Sequence[int]], float],
    redis_pid: int | None,
) -> list[FloorResult]:
    pids = [os.getpid(), *([redis_pid] if redis_pid is not None else [])]
    results: list[FloorResult] = []

    async def measure(label: str, graph: Any, tag: str) -> None:
        await _sessions(graph, f"warm-{tag}", 4, 2)
        cpu, started = cpu_of(pids), time.perf_counter()
        ok = await _sessions(graph, tag, sessions, turns)
        results.append(
            FloorResult(
                label,
                sessions * turns,
                ok,
                time.perf_counter() - started,
                cpu_of(pids) - cpu,
            )
        )

    model = ScriptedChatModel()
    await measure(
        "graph turn, no checkpointer",
        create_agent(model, tools=[], system_prompt=instructions),
        "bare",
    )
    pool = aioredis.BlockingConnectionPool.from_url(
        redis_url, max_connections=256, timeout=30, health_check_interval=30
    )
    client = aioredis.Redis(connection_pool=pool)
    try:
        async with AsyncRedisSaver(redis_client=client) as saver:
            await saver.asetup()
            await measure(
                "graph turn + AsyncRedisSaver (upstream)",
                create_agent(model, tools=[], system_prompt=instructions, checkpointer=saver),
                "saver",
            )
    finally:
        await client.aclose()
        await pool.disconnect()
    return results


@dataclass(frozen=True)
class TransportFloor:
    sent: int
    latencies: tuple[float, ...]  # seconds, one per entry received

    @property
    def clean(self) -> bool:
        return len(self.latencies) == self.sent

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies) if self.latencies else float("nan")


@dataclass(frozen=True)
class Floors:
    """Scenario (f): the graph turn's floors and the event transport's."""

    graphs: list[FloorResult]
    transport: TransportFloor

    def failures(self) -> list[str]:
        found = [
            f"{floor.label}: {floor.ok}/{floor.tasks} answered as expected"
            for floor in self.graphs
            if not floor.clean
        ]
        if not self.transport.clean:
            read = len(self.transport.latencies)
            found.append(f"event transport: {read}/{self.transport.sent} entries read")
        return found


async def event_transport_floor(
    redis_url: str, count: int = 400, interval: float = 0.005
) -> TransportFloor:
    """Stamped ``XADD`` in a writer process -> ``XREAD BLOCK`` here (see the module)."""
    key = f"bench-floor:{time.time_ns()}"
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (ROOT, os.environ.get("PYTHONPATH")))),
    }
    writer = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bench.floors", "xadd", redis_url, key, str(count), str(interval)),
        cwd=ROOT,
        env=env,
    )
    latencies: list[float] = []
    last = "0-0"
    try:
        deadline = time.monotonic() + 30 + count * interval
        while len(latencies) < count and time.monotonic() < deadline:
            reply: Any = await client.xread({key: last}, count=1024, block=1000)
            now = time.time_ns()
            for _, entries in reply or []:
                for entry_id, fields in entries:
                    last = entry_id
                    latencies.append((now - int(fields["ns"])) / 1e9)
    finally:
        await asyncio.wait_for(writer.wait(), 30)
        await client.delete(key)
        await client.aclose()
    return TransportFloor(count, tuple(latencies))


async def _write_stamped(redis_url: str, key: str, count: int, interval: float) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        await asyncio.sleep(0.5)  # the reader is blocked in XREAD by then
        for _ in range(count):
            await asyncio.sleep(interval)
            await client.xadd(key, {"ns": str(time.time_ns())})
    finally:
        await client.aclose()


if __name__ == "__main__" and sys.argv[1:2] == ["xadd"]:
    url, stream, entries, seconds = sys.argv[2:6]
    asyncio.run(_write_stamped(url, stream, int(entries), float(seconds)))
