"""Tools for the test profiles; each records its invocations where it runs (the worker),
in Redis, so tests observe the effect itself, never the harness's report of it.

Key (test-only, outside every deployment namespace): ``ahp-test:boundary:effects``, a list
of JSON records ``{"tool", "args", "task", "scope", "pid"}`` appended the moment the tool's
effect happens.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolRuntime
from redis.asyncio import Redis

from wire.settings import Settings
from workers.tools import idempotency_key

from .controlled_model import MODEL_REDIS_URL_ENV, PREFIX, SCOPE

EFFECTS = PREFIX + "effects"
EXECUTIONS = PREFIX + "executions"
"""List: every execution of ``dying_effect`` (JSON ``{"task", "key", "pid"}``), appended
as it begins, whether or not its effect is deduplicated."""
DEDUPLICATED = PREFIX + "dedup:"
"""``DEDUPLICATED + <idempotency key>``: set by the first execution of a call that
performs its effect; a later attempt with the same key performs none."""


async def _record(tool: str, args: dict[str, Any]) -> None:
    metadata = get_config().get("metadata", {})
    record = {
        "tool": tool,
        "args": args,
        "task": str(metadata.get("ahp_task_id", "")),
        "scope": str(metadata.get(SCOPE, "")),
        "pid": os.getpid(),
    }
    url = os.environ.get(MODEL_REDIS_URL_ENV) or Settings().redis_url
    client = Redis.from_url(url, decode_responses=True)
    try:
        await client.rpush(EFFECTS, json.dumps(record))
    finally:
        await client.aclose()


async def record_effect(label: str) -> str:
    """Record an effect labelled ``label`` and say so."""
    await _record("record_effect", {"label": label})
    return f"recorded {label}"


async def guarded_effect(label: str) -> str:
    """An effect that needs the caller's approval: records ``label`` when it runs."""
    await _record("guarded_effect", {"label": label})
    return f"guarded {label}"


async def failing_tool(label: str) -> str:
    """Records that it ran, then fails."""
    await _record("failing_tool", {"label": label})
    raise RuntimeError(f"failing_tool refused {label}")


async def record_category(label: str) -> str:
    """Record that ``label`` was categorized (the pipelines' second step)."""
    await _record("record_category", {"label": label})
    return f"categorized {label}"


async def fragile_effect(label: str) -> str:
    """An approval-gated effect whose first run in a task kills its own worker process
    (SIGKILL) before the effect; any later run records ``label``."""
    task = str(get_config().get("metadata", {}).get("ahp_task_id", ""))
    url = os.environ.get(MODEL_REDIS_URL_ENV) or Settings().redis_url
    client = Redis.from_url(url, decode_responses=True)
    try:
        first = await client.set(f"{PREFIX}fragile:{task}", str(os.getpid()), nx=True)
    finally:
        await client.aclose()
    if first:
        os.kill(os.getpid(), signal.SIGKILL)
    await _record("fragile_effect", {"label": label})
    return f"fragile {label}"


async def dying_effect(label: str, runtime: ToolRuntime) -> str:
    """An effect deduplicated by the call's idempotency key; the first attempt in a task
    performs it and then kills its own worker (SIGKILL) while it would still be working.

    Every execution is counted in :data:`EXECUTIONS`; the effect (recorded in the effect
    log) happens once per idempotency key."""
    key = idempotency_key(runtime)
    task = str(get_config().get("metadata", {}).get("ahp_task_id", ""))
    url = os.environ.get(MODEL_REDIS_URL_ENV) or Settings().redis_url
    client = Redis.from_url(url, decode_responses=True)
    try:
        await client.rpush(EXECUTIONS, json.dumps({"task": task, "key": key, "pid": os.getpid()}))
        performs = await client.set(DEDUPLICATED + key, str(os.getpid()), nx=True)
        first = await client.set(f"{PREFIX}dying:{task}", str(os.getpid()), nx=True)
    finally:
        await client.aclose()
    if performs:
        await _record("dying_effect", {"label": label, "key": key})
    if first:
        os.kill(os.getpid(), signal.SIGKILL)  # mid-effect: the result is never returned
    return f"dying {label}"
