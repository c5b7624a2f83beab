"""A controllable LangChain chat model: the only test double in the suite.

It runs inside the worker (a pool thread or a separate OS process) and records what it
actually received in Redis, where the tests read it. Tests never derive observations
from the harness's own state, events or outcomes. Control (hold, release, scripted
deltas, completion, failure) also travels through Redis, so it works across processes.

Its keys in Redis: ``tests.support.boundary_keys``. An input containing
``AHP_KILL_WORKER`` makes the model SIGKILL its own worker process.

Script commands: ``{"op": "delta", "text"}``, ``{"op": "complete", "text", "finish_reason"?,
"usage"?}``, ``{"op": "tool_call", "name", "args", "id"?, "usage"?}`` (ends the call with a
tool call: the agent runs the tool and calls the model again), ``{"op": "fail", "message"}``.
``usage`` replaces the profile's token counts for that call (see
``tests.support.model_replies``, which also builds the chunks of the profile option
``plan``: a reply or tool calls by the call's position in the turn).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from typing import Any
from uuid import uuid4

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.chat_models import agenerate_from_stream
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config
from pydantic import PrivateAttr
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wire.redis_options import pool_options
from wire.settings import Settings

from .boundary_keys import (
    ABORT,
    CALLS,
    CANCELLATIONS,
    CANCELLED_TASKS,
    HELD,
    IN_FLIGHT,
    KILL_MARKER,
    MODEL_REDIS_URL_ENV,
    OVERLAPS,
    SCOPE,
    cursor_key,
    deaf_key,
    live_members,
    running_key,
    scope_script_key,
    script_key,
)

# Re-exported (``as``): tests and tests.support import these from here too.
from .boundary_keys import PREFIX as PREFIX
from .boundary_keys import process_alive as process_alive
from .model_replies import planned_reply, tool_call_reply, usage_fields
from .model_replies import turn_position as turn_position

_TAGGED_REPLY: ContextVar[str | None] = ContextVar("ahp_test_tagged_reply", default=None)
"""The reply of the call in progress when the profile tags replies (``reply_tagged``)."""


class AbortedByTestError(RuntimeError):
    """The test boundary ended a model call that a test left waiting."""


def _tool_name(tool: Any) -> str:
    """The name of a bound tool (a ``BaseTool`` or an OpenAI-style tool dict)."""
    if isinstance(tool, dict):
        function = tool.get("function")
        return (
            str((function or tool).get("name", ""))
            if isinstance(function, dict)
            else str(tool.get("name", ""))
        )
    return str(getattr(tool, "name", ""))


class ControlledChatModel(BaseChatModel):
    reply: str = "native-result"
    ignore_cancellation: bool = False
    scripted: bool = False
    script_by_scope: bool = False
    """Follow the script of the run's boundary scope instead of the task's own script."""
    load_chunks: int = 0
    chunk_delay_ms: int = 0
    """Pause after each load chunk: the stream takes a while (and spans, e.g., an outage)."""
    hold_before_reply: bool = False
    """Stream the load chunks first and wait while held only before the reply chunk."""
    reply_tagged: bool = False
    """End the reply with ``-<call id>`` (also recorded with the call as ``reply``): the
    answers of two runs differ."""
    input_tokens: int | None = None
    output_tokens: int | None = None
    plan: str | None = None
    """JSON list: what each model call of a task does, by its position in the turn."""

    _clients: dict[int, Redis] = PrivateAttr(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return "ahp-controlled"

    def _redis(self) -> Redis:
        loop = id(asyncio.get_running_loop())
        client = self._clients.get(loop)
        if client is None:
            url = os.environ.get(MODEL_REDIS_URL_ENV) or Settings().redis_url
            client = Redis.from_url(url, decode_responses=True, **pool_options())
            self._clients[loop] = client
        return client

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("the controlled model is asynchronous only")

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        raise NotImplementedError("the controlled model is asynchronous only")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return await agenerate_from_stream(self._astream(messages, stop, run_manager, **kwargs))

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        """The controlled model decides its tool calls from its script or plan; binding
        only records the tools offered (LangChain's default refuses to bind)."""
        return self.bind(tools=tools, **{k: v for k, v in kwargs.items() if v is not None})

    def _usage(self) -> UsageMetadata | None:
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return UsageMetadata(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            total_tokens=self.input_tokens + self.output_tokens,
        )

    async def astream(  # type: ignore[override]
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        """The model is invoked the moment its stream is first advanced: the call is
        recorded from here (and counted in flight), whatever cancellation comes next."""
        redis = self._redis()
        metadata = ensure_config(config).get("metadata", {})
        task_id = str(metadata.get("ahp_task_id", ""))
        running = running_key(str(metadata.get("ahp_session_id", "")))
        messages = self._convert_input(input).to_messages()
        scope = str(metadata.get(SCOPE, ""))
        call = {
            "task": task_id,
            "texts": [message.text for message in messages],
            "pid": os.getpid(),
            "scope": scope,
            # The tools the agent offered this call (bound through ``bind_tools``).
            "tools": sorted(_tool_name(tool) for tool in kwargs.get("tools") or ()),
        }
        member = f"{os.getpid()}:{uuid4().hex}"
        reply = f"{self.reply}-{member.split(':')[1][:12]}" if self.reply_tagged else self.reply
        call["reply"] = reply
        tagged = _TAGGED_REPLY.set(reply)
        # Bookkeeping runs to completion whatever happens to the call, so the counters
        # never leak: a cancellation during it is taken after it (or ignored, if so set).
        entered = asyncio.ensure_future(self._enter(redis, running, member, call))
        try:
            await self._finish_then_honour_cancel(redis, entered, task_id, scope)
            async for chunk in super().astream(input, config, stop=stop, **kwargs):
                yield chunk
        finally:
            _TAGGED_REPLY.reset(tagged)
            await asyncio.shield(entered)
            await self._finish_then_honour_cancel(
                redis, asyncio.ensure_future(self._leave(redis, running, member)), task_id, scope
            )

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        redis = self._redis()
        # LangChain streams through _astream without a run manager; the run's config
        # (with the worker's metadata) is in the context.
        metadata = ensure_config().get("metadata", {})
        task_id = str(metadata.get("ahp_task_id", ""))
        scope = str(metadata.get(SCOPE, ""))
        texts_in = [message.text for message in messages]
        if not self.hold_before_reply:
            await self._wait_while_held(redis, task_id, scope)
        if any(KILL_MARKER in text for text in texts_in[-1:]):
            os.kill(os.getpid(), signal.SIGKILL)
        if self.scripted:
            key = scope_script_key(scope) if self.script_by_scope else script_key(task_id)
            async for chunk in self._follow_script(redis, key, task_id, scope):
                yield chunk
            return
        if self.plan is not None:
            yield planned_reply(self.plan, messages, self._usage())
            return
        reply = _TAGGED_REPLY.get() or self.reply
        texts = [f"chunk{index} " for index in range(self.load_chunks)] + [reply]
        for index, text in enumerate(texts):
            last = index == len(texts) - 1
            if last and self.hold_before_reply:
                await self._wait_while_held(redis, task_id, scope)
            await self._honour_swallowed_cancel(redis, task_id, scope)
            chunk = ChatGenerationChunk(
                message=AIMessageChunk(content=text, usage_metadata=self._usage() if last else None)
            )
            yield chunk
            if self.chunk_delay_ms and not last:
                await self._sleep(redis, self.chunk_delay_ms / 1000, task_id, scope)

    async def _cancelled(self, redis: Redis, task_id: str, scope: str = "") -> bool:
        """Count a cancellation that reached the call; whether the call honours it."""
        await asyncio.shield(self._count_cancel(redis, task_id))
        if self.ignore_cancellation:
            return False
        return not (scope and await asyncio.shield(redis.exists(deaf_key(scope))))

    @staticmethod
    async def _count_cancel(redis: Redis, task_id: str) -> None:
        await redis.incr(CANCELLATIONS)
        if task_id:
            await redis.sadd(CANCELLED_TASKS, task_id)

    async def _sleep(self, redis: Redis, seconds: float, task_id: str, scope: str) -> None:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            if await self._cancelled(redis, task_id, scope):
                raise

    async def _finish_then_honour_cancel(
        self, redis: Redis, work: asyncio.Future[Any], task_id: str, scope: str
    ) -> None:
        """Finish the bookkeeping, then take a cancellation that arrived during it the
        way the rest of the call does: a deafened scope disregards it too."""
        cancelled = False
        while not work.done():
            try:
                await asyncio.shield(work)
            except asyncio.CancelledError:
                cancelled = True
        if cancelled and await self._cancelled(redis, task_id, scope):
            raise asyncio.CancelledError

    @staticmethod
    async def _enter(redis: Redis, running: str, member: str, call: dict[str, Any]) -> None:
        await redis.rpush(CALLS, json.dumps(call))
        await redis.sadd(IN_FLIGHT, member)
        await redis.sadd(running, member)
        # Two model calls of one session at once would mean two graph runs on one thread.
        if len(live_members(set(await redis.smembers(running)))) > 1:
            await redis.incr(OVERLAPS)

    @staticmethod
    async def _leave(redis: Redis, running: str, member: str) -> None:
        await redis.srem(running, member)
        await redis.srem(IN_FLIGHT, member)

    async def _honour_swallowed_cancel(self, redis: Redis, task_id: str, scope: str) -> None:
        """redis-py can finish a command whose task was cancelled and drop the
        CancelledError; the task still counts the request, so honour it here."""
        task = asyncio.current_task()
        if task is not None and task.cancelling() > 0:
            task.uncancel()
            if await self._cancelled(redis, task_id, scope):
                raise asyncio.CancelledError

    async def _wait_while_held(self, redis: Redis, task_id: str, scope: str) -> None:
        while True:
            await self._honour_swallowed_cancel(redis, task_id, scope)
            try:
                try:
                    held, aborted = await redis.mget(HELD, ABORT)
                except (RedisConnectionError, RedisTimeoutError):
                    # Redis is restarting: the control channel is down, not the "provider";
                    # a held call stays held until the test can release it.
                    await asyncio.sleep(0.05)
                    continue
                if aborted:
                    raise AbortedByTestError("model call aborted by the test boundary")
                if not held:
                    await self._honour_swallowed_cancel(redis, task_id, scope)
                    return
                await asyncio.sleep(0.005)
            except asyncio.CancelledError:
                if await self._cancelled(redis, task_id, scope):
                    raise

    async def _follow_script(
        self, redis: Redis, key: str, task_id: str, scope: str
    ) -> AsyncIterator[ChatGenerationChunk]:
        # Commands are read by position, never popped: a read interrupted by a
        # cancellation cannot lose a command. The position carries over between the
        # model calls of one task (a tool call ends a call, the next goes on from it).
        reading = asyncio.ensure_future(redis.get(cursor_key(key)))
        await self._finish_then_honour_cancel(redis, reading, task_id, scope)
        cursor = int(reading.result() or 0)
        pending: list[str] = []
        while True:
            await self._honour_swallowed_cancel(redis, task_id, scope)
            try:
                if not pending:
                    if await redis.exists(ABORT):
                        raise AbortedByTestError("model call aborted by the test boundary")
                    pending = list(await redis.lrange(key, cursor, cursor + 999))
                    if not pending:
                        await asyncio.sleep(0.002)
                        continue
            except asyncio.CancelledError:
                if await self._cancelled(redis, task_id, scope):
                    raise
                continue
            raw = pending.pop(0)
            cursor += 1
            command = json.loads(raw)
            if command["op"] in {"complete", "tool_call"}:
                # Kept whatever cancellation lands meanwhile, then taken like the rest of
                # the call takes one: a call set to disregard it still ends as scripted.
                saving = asyncio.ensure_future(redis.set(cursor_key(key), cursor))
                await self._finish_then_honour_cancel(redis, saving, task_id, scope)
            if command["op"] == "delta":
                yield ChatGenerationChunk(message=AIMessageChunk(content=command["text"]))
            elif command["op"] == "complete":
                usage, raw_usage = usage_fields(command.get("usage", self._usage()))
                metadata = {"finish_reason": command.get("finish_reason", "stop"), **raw_usage}
                # A null text is a response without any content block (no text at all).
                content = [] if command["text"] is None else command["text"]
                yield ChatGenerationChunk(
                    message=AIMessageChunk(
                        content=content,
                        response_metadata=metadata,
                        usage_metadata=usage,
                    )
                )
                return
            elif command["op"] == "tool_call":
                usage, raw_usage = usage_fields(command.get("usage", self._usage()))
                yield tool_call_reply(command, usage, raw_usage)
                return
            elif command["op"] == "fail":
                raise RuntimeError(command["message"])
