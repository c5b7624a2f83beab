"""A chat model shaped like a remote one: it awaits while it streams (no CPU), and
records where it runs (the worker) what the scale tests count.

Each call streams ``chunks`` pieces spaced ``seconds / chunks`` apart (the first after
one pause), each ``<index>@<ns> `` with the worker's ``time.time_ns()`` just before it is
yielded, and reports usage on its last chunk. With ``effect_first`` a task's first call
(turn position 0) asks for ``record_effect`` instead, and its second call streams: a run
handed back or lost mid-stream resumes after an effect that must not happen twice. With
``blocking_first`` the first call asks for ``block_thread``, a synchronous tool that
blocks its thread for ``block_seconds``.

Bookkeeping is one pipelined round trip per call start and end, and one per
cancellation, under ``ahp-test:paced:<scope>:`` (``scope``: the boundary scope in the
run metadata):

- ``calls`` hash task id -> model calls (more than one for a task: an extra call);
- ``pids`` hash task id -> the pid of the worker process of its latest call;
- ``in_flight`` hash pid -> calls streaming in that process now, ``peak`` hash pid ->
  the most at once;
- ``cancelled`` hash task id -> ``time.time_ns()`` when the call saw its cancellation;
- ``gaps`` sorted set: the longest pause between two chunks of each call (seconds), by
  task id: a loop stalled by blocking work shows here.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.runnables.config import ensure_config
from pydantic import PrivateAttr
from redis.asyncio import BlockingConnectionPool, Redis

from bench.streaming_model import AsyncStreamingChatModel
from wire.redis_options import pool_options
from wire.settings import Settings

from .controlled_model import MODEL_REDIS_URL_ENV, SCOPE, turn_position

PREFIX = "ahp-test:paced:"

_PEAK = """
local now = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
local peak = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if now > peak then redis.call('HSET', KEYS[2], ARGV[1], now) end
return now
"""


def key(scope: str, name: str) -> str:
    return f"{PREFIX}{scope}:{name}"


class PacedChatModel(AsyncStreamingChatModel):
    chunks: int = 30
    seconds: float = 3.0
    effect_first: bool = False
    blocking_first: bool = False
    block_seconds: float = 5.0

    _clients: dict[int, Redis] = PrivateAttr(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return "ahp-paced"

    def _redis(self) -> Redis:
        loop = id(asyncio.get_running_loop())
        client = self._clients.get(loop)
        if client is None:
            url = os.environ.get(MODEL_REDIS_URL_ENV) or Settings().redis_url
            pool = BlockingConnectionPool.from_url(
                url, decode_responses=True, max_connections=32, timeout=60, **pool_options()
            )
            client = Redis(connection_pool=pool)
            self._clients[loop] = client
        return client

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=tools, **{k: v for k, v in kwargs.items() if v is not None})

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        metadata = ensure_config().get("metadata", {})
        task_id = str(metadata.get("ahp_task_id", ""))
        scope = str(metadata.get(SCOPE, ""))
        redis = self._redis()
        pid = str(os.getpid())
        first = turn_position(messages) == 0
        if first and (self.effect_first or self.blocking_first):
            await self._count_call(redis, scope, task_id, pid)
            name = "record_effect" if self.effect_first else "block_thread"
            args: dict[str, Any] = (
                {"label": task_id} if self.effect_first else {"seconds": self.block_seconds}
            )
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=[tool_call_chunk(name=name, args=_json(args), id=task_id)],
                    usage_metadata=_usage(),
                )
            )
            return
        await self._count_call(redis, scope, task_id, pid)
        await redis.eval(_PEAK, 2, key(scope, "in_flight"), key(scope, "peak"), pid)
        pause = self.seconds / self.chunks
        longest = 0.0
        last = time.monotonic()
        try:
            for index in range(self.chunks):
                await asyncio.sleep(pause)
                now = time.monotonic()
                longest = max(longest, now - last)
                last = now
                yield ChatGenerationChunk(
                    message=AIMessageChunk(
                        content=f"{index}@{time.time_ns()} ",
                        usage_metadata=_usage() if index == self.chunks - 1 else None,
                    )
                )
        except asyncio.CancelledError:
            await asyncio.shield(redis.hset(key(scope, "cancelled"), task_id, time.time_ns()))
            raise
        finally:
            pipe = redis.pipeline(transaction=False)
            pipe.hincrby(key(scope, "in_flight"), pid, -1)
            pipe.zadd(key(scope, "gaps"), {task_id: longest})
            await asyncio.shield(pipe.execute())

    @staticmethod
    async def _count_call(redis: Redis, scope: str, task_id: str, pid: str) -> None:
        pipe = redis.pipeline(transaction=False)
        pipe.hincrby(key(scope, "calls"), task_id, 1)
        pipe.hset(key(scope, "pids"), task_id, pid)
        await pipe.execute()


def _usage() -> UsageMetadata:
    return UsageMetadata(input_tokens=10, output_tokens=30, total_tokens=40)


def _json(args: dict[str, Any]) -> str:
    return json.dumps(args)


def block_thread(seconds: float) -> str:
    """Block this thread for ``seconds`` (a synchronous tool doing blocking I/O)."""
    time.sleep(seconds)
    return f"blocked {seconds} s"


__all__ = ["PREFIX", "PacedChatModel", "block_thread", "key"]
