"""The soak's tools with a real effect (``bench/soak.py``), recorded where they run.

Both take a while after their effect (0.3-1.2 s: the chaos loop's SIGKILLs land inside
them) and record in Redis, under the soak-only prefix ``soak:<namespace>:``:

- ``tool_runs``: a list, one JSON ``{"tool", "task", "key", "pid"}`` per execution, pushed
  as it begins;
- ``tool_effects``: a list, one JSON ``{"tool", "task", "key"}`` per effect performed.

``soak_effect`` is at least once: it performs its effect only if no execution with the
same idempotency key did (``tool_done:<key>``, ``SET NX``), so a re-run after a lost worker
performs none. ``soak_effect_once`` is at most once and does not deduplicate: every
execution performs its effect, so the soak sees a second execution as a second effect.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from typing import Any

from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolRuntime
from redis.asyncio import Redis
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from bench.soak_model import soak_prefix
from wire.redis_options import pool_options
from wire.settings import Settings
from workers.tools import idempotency_key

MIN_SECONDS = 0.3
MAX_SECONDS = 1.2

# KEYS[1] the call's deduplication mark, KEYS[2] the effect log; ARGV[1] '1': deduplicate,
# ARGV[2] the effect record. Performs the effect unless deduplicating finds it done.
_EFFECT = """
if ARGV[1] == '1' and redis.call('SET', KEYS[1], '1', 'NX') == false then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
"""


def tool_runs_key(namespace: str) -> str:
    return soak_prefix(namespace) + "tool_runs"


def tool_effects_key(namespace: str) -> str:
    return soak_prefix(namespace) + "tool_effects"


def tool_done_key(namespace: str, key: str) -> str:
    return soak_prefix(namespace) + f"tool_done:{key}"


async def _patiently(command: Any) -> Any:
    """The soak's bookkeeping waits out a Redis restart (the tool's own effect would too)."""
    for attempt in range(300):
        try:
            return await command()
        except (RedisConnectionError, RedisTimeoutError, BusyLoadingError):
            if attempt == 299:
                raise
            await asyncio.sleep(0.1)
    return None


async def _run(tool: str, runtime: ToolRuntime, *, deduplicate: bool) -> str:
    settings = Settings()
    namespace = settings.namespace
    key = idempotency_key(runtime)
    task = str(get_config().get("metadata", {}).get("ahp_task_id", ""))
    record = {"tool": tool, "task": task, "key": key}
    client = Redis.from_url(settings.redis_url, decode_responses=True, **pool_options())
    try:
        await _patiently(
            lambda: client.rpush(
                tool_runs_key(namespace), json.dumps({**record, "pid": os.getpid()})
            )
        )
        # The effect and its deduplication mark are one atomic step (as a real tool's
        # would be: a unique constraint, a provider's idempotency key).
        await _patiently(
            lambda: client.eval(
                _EFFECT,
                2,
                tool_done_key(namespace, key),
                tool_effects_key(namespace),
                "1" if deduplicate else "0",
                json.dumps(record),
            )
        )
    finally:
        await client.aclose()
    await asyncio.sleep(random.uniform(MIN_SECONDS, MAX_SECONDS))  # still working: kill here
    return f"{tool} done"


async def soak_effect(label: str, runtime: ToolRuntime) -> str:
    """Perform the soak's effect for ``label`` once per idempotency key (at least once)."""
    return await _run("soak_effect", runtime, deduplicate=True)


async def soak_effect_once(label: str, runtime: ToolRuntime) -> str:
    """Perform the soak's effect for ``label`` on every execution (at most once: the
    worker never runs it twice)."""
    return await _run("soak_effect_once", runtime, deduplicate=False)


__all__ = [
    "soak_effect",
    "soak_effect_once",
    "tool_done_key",
    "tool_effects_key",
    "tool_runs_key",
]
