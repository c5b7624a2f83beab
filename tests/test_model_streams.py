"""A cancelled model call closes the provider's stream at once, wherever the cancellation
landed (``workers.model_streams``).

The cancellation is delivered while LangChain's ``astream`` awaits an async callback
between two chunks: the provider's generator is then suspended at its ``yield``, outside
the await that the cancellation interrupts. Left alone, Python closes it only once no
reference to it is left (the soak saw a cancelled run's model call go on for 34 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import PrivateAttr

from workers.model_streams import closing_model_streams, track_streams


class _Provider(BaseChatModel):
    """Streams a chunk every 10 ms until closed; says when its stream was closed. Its
    streams are also referenced elsewhere (as a stored exception's traceback, a tracing
    run or a client's connection pool may hold them): no reference count drop closes them."""

    _closed: asyncio.Event = PrivateAttr(default_factory=asyncio.Event)
    _held: list[Any] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "test-provider"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="x"))])

    def _astream(  # type: ignore[override]
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        stream = self._stream()
        self._held.append(stream)
        return stream

    async def _stream(self) -> AsyncIterator[ChatGenerationChunk]:
        try:
            while True:
                await asyncio.sleep(0.01)
                yield ChatGenerationChunk(message=AIMessageChunk(content="token "))
        finally:
            self._closed.set()


class _SlowCallback(AsyncCallbackHandler):
    """Awaits, on the second token, until the call is cancelled."""

    def __init__(self) -> None:
        self.tokens = 0
        self.waiting = asyncio.Event()

    async def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        self.tokens += 1
        if self.tokens == 2:
            self.waiting.set()
            await asyncio.Event().wait()


async def test_a_call_cancelled_inside_a_callback_closes_the_providers_stream() -> None:
    provider = track_streams(_Provider())
    callback = _SlowCallback()

    async def call() -> None:
        async with closing_model_streams():
            async for _ in provider.astream("hello", config={"callbacks": [callback]}):
                pass

    running = asyncio.ensure_future(call())
    await asyncio.wait_for(callback.waiting.wait(), 5)
    assert not provider._closed.is_set()
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    # Closed by the time the call has ended: no garbage collection waited for.
    assert provider._closed.is_set()


async def test_tracking_leaves_a_model_that_streams_unchanged() -> None:
    provider = track_streams(track_streams(_Provider()))  # idempotent
    chunks: list[str] = []
    async with closing_model_streams():
        async for chunk in provider.astream("hello"):
            chunks.append(str(chunk.content))
            if len(chunks) == 3:
                break
    assert chunks == ["token "] * 3
