"""The graph ``bench/scale.py`` (f) serves with LangGraph's own server (``langgraph dev``).

The in-process reference's graph (``START -> model -> END`` on ``MessagesState``) and the
same model call as ``bench.scale_model`` -- it awaits ``BENCH_SCALE_SECONDS`` while it
streams ``BENCH_SCALE_CHUNKS`` pieces ``[<index>@<time.time_ns()>]`` evenly spaced, with
usage on the last -- without the Redis bookkeeping. It imports only langchain-core and
langgraph: ``langgraph dev`` loads it by path from a separate venv that has neither this
project nor its dependencies.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.chat_models import agenerate_from_stream
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langgraph.graph import END, START, MessagesState, StateGraph


class StampedChatModel(BaseChatModel):
    seconds: float = 3.0
    chunks: int = 30

    @property
    def _llm_type(self) -> str:
        return "ahp-bench-scale-langgraph"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("streams asynchronously only")

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        raise NotImplementedError("streams asynchronously only")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return await agenerate_from_stream(self._astream(messages, stop, run_manager, **kwargs))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        prompt = sum(len(message.text.split()) for message in messages)
        for index in range(self.chunks):
            await asyncio.sleep(self.seconds / self.chunks)
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
            text = f"[{index}@{time.time_ns()}]"
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=text, usage_metadata=usage))
            yield chunk


MODEL = StampedChatModel(
    seconds=float(os.environ.get("BENCH_SCALE_SECONDS", "3")),
    chunks=int(os.environ.get("BENCH_SCALE_CHUNKS", "30")),
)


async def model(state: MessagesState) -> dict[str, list[BaseMessage]]:
    return {"messages": [await MODEL.ainvoke(state["messages"])]}


_builder = StateGraph(MessagesState)
_builder.add_node("model", model)
_builder.add_edge(START, "model")
_builder.add_edge("model", END)
graph = _builder.compile()
