"""The chat model of ``bench/scale.py``: a remote model's call, without the remote model.

Every call awaits ``seconds`` in total while it streams ``chunks`` pieces, evenly spaced
(``asyncio.sleep`` before each one: no CPU), and reports usage on the last piece
(``usage_metadata``). Each piece is ``[<index>@<ns>]`` as in ``bench/clock_model.py``: its
position and the wall clock ``time.time_ns()`` read right before it is yielded, which the
caller subtracts from its own clock at receipt (the event latency; the processes share
the machine's ``CLOCK_REALTIME``).

It records in Redis, where it runs (a worker process, or the caller for the in-process
reference), under the bench-only prefix ``bench:scale:<namespace>:`` (outside every key
of the deployment, ``wire/keys.py``), by one script at the start of a call and one at its
end:

* ``...:inflight`` hash: calls running now, by ``os.getpid()``, and over all processes
  (field ``all``);
* ``...:peak`` hash: the most calls that ran at once, by pid and over all (``all``);
* ``...:calls`` hash: calls by task (``ahp_task_id`` of the LangChain run metadata in a
  worker, ``thread:<thread_id>`` in the reference, which has no task id there): a task
  with more than one call was run twice (its lease was lost, or its message redelivered).

The end of a call is recorded even when the call is cancelled. Called without a streaming
consumer (``ainvoke``, as the in-process reference calls it), it makes the same call and
returns its pieces joined in one message.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models.chat_models import agenerate_from_stream
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables.config import ensure_config
from pydantic import PrivateAttr
from redis.asyncio import BlockingConnectionPool, Redis

from bench.clock_model import stamps
from bench.streaming_model import AsyncStreamingChatModel
from wire.redis_options import pool_options
from wire.settings import Settings

ALL = "all"
"""The field of the counters over every process."""
CLIENT_NAME = "bench-scale-model"
"""The ``CLIENT SETNAME`` of the model's bookkeeping connections: the bench leaves them
out when it counts a process's Redis connections (they are not the harness's)."""
POOL_SIZE = 16
"""Bookkeeping connections per process (a blocking pool: hundreds of calls at once wait
for one instead of failing; redis-py's default pool refuses the 101st)."""

# KEYS[1] inflight hash, KEYS[2] peak hash, KEYS[3] calls hash
# ARGV[1] pid, ARGV[2] the call's task key
# Counts the call in, raises the peaks it passes; returns the task's call count.
_START = """
local mine = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
local all = redis.call('HINCRBY', KEYS[1], 'all', 1)
if mine > tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') then
  redis.call('HSET', KEYS[2], ARGV[1], mine)
end
if all > tonumber(redis.call('HGET', KEYS[2], 'all') or '0') then
  redis.call('HSET', KEYS[2], 'all', all)
end
return redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
"""

# KEYS[1] inflight hash; ARGV[1] pid. Counts the call out.
_END = """
redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
return redis.call('HINCRBY', KEYS[1], 'all', -1)
"""


def prefix(namespace: str) -> str:
    return f"bench:scale:{namespace}:"


def inflight_key(namespace: str) -> str:
    return prefix(namespace) + "inflight"


def peak_key(namespace: str) -> str:
    return prefix(namespace) + "peak"


def calls_key(namespace: str) -> str:
    return prefix(namespace) + "calls"


def bench_keys(namespace: str) -> tuple[str, str, str]:
    return inflight_key(namespace), peak_key(namespace), calls_key(namespace)


class ScaleChatModel(AsyncStreamingChatModel):
    """Streams ``chunks`` clock-stamped pieces over ``seconds`` and records its calls.

    ``redis_url`` and ``namespace`` default to the process's ``AHP_*`` settings (a worker's
    deployment); the in-process reference passes them.
    """

    seconds: float = 3.0
    chunks: int = 30
    redis_url: str | None = None
    namespace: str | None = None

    _clients: dict[int, Redis] = PrivateAttr(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return "ahp-bench-scale"

    def _redis(self) -> tuple[Redis, str]:
        if self.redis_url is None or self.namespace is None:
            settings = Settings()
            self.redis_url = self.redis_url or settings.redis_url
            self.namespace = self.namespace or settings.namespace
        loop = id(asyncio.get_running_loop())
        client = self._clients.get(loop)
        if client is None:
            pool = BlockingConnectionPool.from_url(
                self.redis_url,
                max_connections=POOL_SIZE,
                timeout=60,
                decode_responses=True,
                client_name=CLIENT_NAME,
                **pool_options(),
            )
            client = Redis(connection_pool=pool)
            self._clients[loop] = client
        return client, self.namespace

    async def aclose(self) -> None:
        """Close the bookkeeping client of the running loop (the reference's caller)."""
        client = self._clients.pop(id(asyncio.get_running_loop()), None)
        if client is not None:
            await client.aclose()
            await client.connection_pool.disconnect()

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """``ainvoke`` without a streaming consumer (the in-process reference calls the
        model so): the same call, its pieces joined into one message."""
        return await agenerate_from_stream(self._astream(messages, stop, run_manager, **kwargs))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        redis, namespace = self._redis()
        config = ensure_config()
        task = config.get("metadata", {}).get("ahp_task_id")
        if not task:
            task = f"thread:{config.get('configurable', {}).get('thread_id', '')}"
        pid = str(os.getpid())
        inflight, peak, calls = bench_keys(namespace)
        await _to_the_end(redis.eval(_START, 3, inflight, peak, calls, pid, str(task)))
        try:
            prompt = sum(len(message.text.split()) for message in messages)
            pause = self.seconds / self.chunks
            for index in range(self.chunks):
                await asyncio.sleep(pause)
                last = index == self.chunks - 1
                usage = (
                    UsageMetadata(
                        input_tokens=prompt,
                        output_tokens=self.chunks,
                        total_tokens=prompt + self.chunks,
                    )
                    if last
                    else None
                )
                # The stamp is the last thing read before the piece leaves the model.
                text = f"[{index}@{time.time_ns()}]"
                yield ChatGenerationChunk(
                    message=AIMessageChunk(content=text, usage_metadata=usage)
                )
        finally:
            await _to_the_end(redis.eval(_END, 1, inflight, pid))


async def _to_the_end(command: Awaitable[Any]) -> None:
    """Run a bookkeeping command to completion even if the call is cancelled meanwhile;
    the cancellation is honoured right after it."""
    work = asyncio.ensure_future(command)
    cancelled = False
    while not work.done():
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            cancelled = True
    work.result()
    if cancelled:
        raise asyncio.CancelledError


__all__ = [
    "ALL",
    "CLIENT_NAME",
    "ScaleChatModel",
    "bench_keys",
    "calls_key",
    "inflight_key",
    "peak_key",
    "prefix",
    "stamps",
]
