"""The chat model of the soak run (``bench/soak.py``): slow, streaming, and self-recording.

It runs inside the workers. Every call streams a deterministic answer to the latest
human message over a random 0.2-1.5 s (so SIGKILLs land mid-call), and records in Redis,
under the soak-only prefix ``soak:<namespace>:`` (outside every deployment key), when it
started and when it ended, stamped with the Redis server clock (``TIME``), with the pid,
the process group id (= the ``WorkerProcess`` main pid the soak script kills) and the
session and task ids from the LangChain run metadata. A call of a SIGKILLed worker never
records its end; the soak script closes it at the kill time it recorded itself.

Keys: ``soak:<ns>:calls`` list of call ids in start order; ``soak:<ns>:call:<id>`` hash
``pid``, ``pgid``, ``session``, ``task``, ``start_us``, ``end_us``, ``how``
(``done``: answered, ``tool``: called the profile's tool | ``cancelled`` | ``error``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import uuid4

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.runnables import Runnable
from langchain_core.runnables.config import ensure_config
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr
from redis.asyncio import Redis
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from bench.streaming_model import AsyncStreamingChatModel
from wire.redis_options import pool_options
from wire.settings import Settings

CHUNKS = 8

# KEYS[1] call hash, KEYS[2] call list (only when starting)
# ARGV: field name of the stamp, call id, then field/value pairs to store
# Stamps the server clock in microseconds (string concatenation: no float formatting).
_STAMP = """
local t = redis.call('TIME')
local stamp = t[1] .. string.format('%06d', tonumber(t[2]))
redis.call('HSET', KEYS[1], ARGV[1], stamp)
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if KEYS[2] then redis.call('RPUSH', KEYS[2], ARGV[2]) end
return stamp
"""


def soak_prefix(namespace: str) -> str:
    return f"soak:{namespace}:"


def calls_key(namespace: str) -> str:
    return soak_prefix(namespace) + "calls"


def call_key(namespace: str, call_id: str) -> str:
    return soak_prefix(namespace) + f"call:{call_id}"


def expected_reply(text: str) -> str:
    """The answer this model gives to the human message ``text``."""
    return f"[soak model] answer to {text!r}"


class SoakChatModel(AsyncStreamingChatModel):
    """Streams ``expected_reply(latest question)`` over ``min_seconds``-``max_seconds``.

    With ``tool`` set, a turn's first call (its latest message is the question) instead
    calls that tool with the question as ``label``; the call after the tool's result
    answers as above."""

    min_seconds: float = 0.2
    max_seconds: float = 1.5
    tool: str | None = None

    _clients: dict[int, Redis] = PrivateAttr(default_factory=dict)
    _namespace: str | None = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "ahp-soak"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, Any]:
        """Offer tools (the model calls ``tool`` only)."""
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools])

    def _redis(self) -> tuple[Redis, str]:
        if self._namespace is None:
            self._namespace = Settings().namespace
        loop = id(asyncio.get_running_loop())
        client = self._clients.get(loop)
        if client is None:
            client = Redis.from_url(Settings().redis_url, decode_responses=True, **pool_options())
            self._clients[loop] = client
        return client, self._namespace

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        redis, namespace = self._redis()
        metadata = ensure_config().get("metadata", {})
        call_id = uuid4().hex
        key = call_key(namespace, call_id)
        fields = [
            "pid", str(os.getpid()), "pgid", str(os.getpgid(0)),
            "session", str(metadata.get("ahp_session_id", "")),
            "task", str(metadata.get("ahp_task_id", "")),
        ]  # fmt: skip
        # The start is on record before the call does anything.
        await _complete(_stamp(redis, 2, key, calls_key(namespace), "start_us", call_id, *fields))
        how = "error"
        ended = False
        try:
            asked = [message.text for message in messages if isinstance(message, HumanMessage)]
            if self.tool is not None and messages and isinstance(messages[-1], HumanMessage):
                await asyncio.sleep(random.uniform(self.min_seconds, self.max_seconds) / 2)
                call = tool_call_chunk(
                    name=self.tool,
                    args=json.dumps({"label": asked[-1] if asked else ""}),
                    id=f"call-{uuid4().hex[:12]}",
                    index=0,
                )
                # The call is over once its one chunk is made: its end is on record before
                # the chunk leaves (the consumer need not advance the stream past it).
                how = "tool"  # a tool call, not an answer
                await _complete(_stamp(redis, 1, key, "end_us", call_id, "how", how))
                ended = True
                yield ChatGenerationChunk(
                    message=AIMessageChunk(
                        content="", tool_call_chunks=[call], usage_metadata=_usage(messages, "")
                    )
                )
                return
            reply = expected_reply(asked[-1] if asked else "")
            pieces = _split(reply, CHUNKS)
            pause = random.uniform(self.min_seconds, self.max_seconds) / len(pieces)
            for index, piece in enumerate(pieces):
                await asyncio.sleep(pause)
                last = index == len(pieces) - 1
                usage = _usage(messages, reply) if last else None
                yield ChatGenerationChunk(
                    message=AIMessageChunk(content=piece, usage_metadata=usage)
                )
            how = "done"
        except (asyncio.CancelledError, GeneratorExit):
            how = "cancelled"
            raise
        finally:
            if not ended:
                await _complete(_stamp(redis, 1, key, "end_us", call_id, "how", how))


def _split(text: str, parts: int) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _usage(messages: list[BaseMessage], reply: str) -> UsageMetadata:
    prompt = sum(len(message.text.split()) for message in messages)
    completion = len(reply.split())
    return UsageMetadata(
        input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion
    )


async def _stamp(redis: Redis, count: int, *args: str) -> None:
    """Record a stamp; the soak's bookkeeping (not the "provider") waits out a Redis restart,
    so a restart under load never looks like a failing model."""
    for attempt in range(300):
        try:
            await redis.eval(_STAMP, count, *args)
            return
        except (RedisConnectionError, RedisTimeoutError, BusyLoadingError):
            if attempt == 299:
                raise
            await asyncio.sleep(0.1)


async def _complete(command: Any) -> None:
    """Run a bookkeeping command to completion even if the caller is cancelled meanwhile;
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


__all__ = ["SoakChatModel", "call_key", "calls_key", "expected_reply", "soak_prefix"]
