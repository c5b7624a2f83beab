"""Tool calls whose worker was lost mid-call: attempts, idempotency keys, delivery rules.

A tool runs inside a worker. When the worker dies after the tool began (SIGKILL, OOM, a
lost machine) and before its result was checkpointed, the task resumes on another
worker from the checkpoint before that call, and the call comes round again. Whether it
runs again is the tool's declared delivery (``ToolSpec.delivery``):

- ``at_least_once`` (the default): it runs again, as attempt 2 (3, ...) of the same call,
  with the same idempotency key as every other attempt of that call; the tool must
  deduplicate its effect by that key.
- ``at_most_once``: it never starts again; the model reads that the call's outcome is
  unknown.

Attempts are counted durably, under the run's lease, the moment before the tool runs
(``tool_attempt.lua``): a count above one is the proof that an earlier attempt began.
Each attempt is its own piece of work on the caller's stream (work id ``<call id>`` for
the first, ``<call id>#<n>`` after), so a re-run never reads as a second start of one run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolCallRequest, ToolRuntime

from .checkpoints import lease_of
from .errors import StaleLeaseError, ToolIdempotencyKeyMissingError

IDEMPOTENCY_KEY = "ahp_idempotency_key"
"""Tool runtime config (``configurable``): the call's idempotency key."""


def attempt_work_id(tool_call_id: str, attempt: int) -> str:
    """The work id of one attempt of a tool call on the caller's stream."""
    return tool_call_id if attempt <= 1 else f"{tool_call_id}#{attempt}"


def call_key(task_id: str, tool_call_id: str) -> str:
    """The idempotency key of a tool call: the same on every attempt of it (the task and
    the model's tool call id, both kept in the checkpoint the task resumes from)."""
    return f"{task_id}:{tool_call_id}"


async def begin_attempt(task_id: str, tool_call_id: str) -> int:
    """Count this attempt of the call under the run's lease; its number (1: the first).

    Raises:
        StaleLeaseError: the lease is no longer the run's (it must not start a tool).
    """
    lease = lease_of(get_config())
    if lease is None:  # a graph run outside a worker (no lease, nothing to count)
        return 1
    attempt = await lease.store.tool_attempt(lease.session_id, task_id, tool_call_id, lease.value)
    if attempt == 0:
        raise StaleLeaseError(
            f"{task_id}: the lease was lost before tool call {tool_call_id} could start",
            thread_id=lease.session_id,
            task_id=task_id,
        )
    return attempt


def with_idempotency_key(request: ToolCallRequest, key: str) -> ToolCallRequest:
    """The request with ``key`` in its tool runtime's config, where
    :func:`idempotency_key` finds it."""
    runtime: Any = request.runtime
    if not isinstance(runtime, ToolRuntime):
        return request
    config: RunnableConfig = {**(runtime.config or {})}
    config["configurable"] = {**config.get("configurable", {}), IDEMPOTENCY_KEY: key}
    # ``override`` does not take the runtime; the request is a dataclass.
    return replace(request, runtime=replace(runtime, config=config))


def idempotency_key(runtime: ToolRuntime[Any, Any]) -> str:
    """The idempotency key of the tool call being run: the same on every attempt of this
    call, different for every other call. A tool takes ``runtime: ToolRuntime`` (LangChain
    injects it) and deduplicates its effect by this key::

        async def send_invoice(order: str, runtime: ToolRuntime) -> str:
            key = idempotency_key(runtime)
            ...  # e.g. the payment provider's Idempotency-Key header

    Raises:
        ToolIdempotencyKeyMissingError: the tool is not run by a worker's agent.
    """
    key = (runtime.config or {}).get("configurable", {}).get(IDEMPOTENCY_KEY)
    if not isinstance(key, str) or not key:
        raise ToolIdempotencyKeyMissingError(
            "no idempotency key: the tool is not run by an agent-harness-protocol-celery worker"
        )
    return key


__all__ = [
    "IDEMPOTENCY_KEY",
    "attempt_work_id",
    "begin_attempt",
    "call_key",
    "idempotency_key",
    "with_idempotency_key",
]
