"""Scenario (f) of ``bench/latency_throughput.py``: the floors under the CPU per task.

The same graph turn every system of the benchmark runs, measured bare in this process:
langchain's ``create_agent`` with the benchmark's scripted model and no middleware, its
sessions run concurrently as in scenario (c), once without a checkpointer and once on
the upstream ``AsyncRedisSaver`` (the reference's saver) against the run's Redis. The CPU
of this process and of the embedded Redis per task is what any harness built on that
graph and that saver spends at least, before its own work (a broker hop, leases, events,
a caller): the floor scenario (c)'s CPU target is measured against. Every answer is
checked for the scripted reply.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.redis.aio import AsyncRedisSaver

from workers.scripted_model import ScriptedChatModel

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
