"""A scripted chat model for demos: deterministic, local, and labelled as such.

It streams a reply that quotes the latest request and the one before it, as seen in the
conversation, so a demo shows context carried between the tasks of a session. It
reports token usage by counting whitespace-separated words.

When the agent offers it the ``word_count`` tool (profile ``scripted-agent``), it first
calls that tool on the latest request, every time, and its reply then quotes the tool's
result: a deterministic tool call for the demo. Without tools it answers at once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any
from uuid import uuid4

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

DEMO_TOOL = "word_count"


def _reply(messages: list[BaseMessage]) -> str:
    """Quote the latest question and the one before it (constant size per turn), and the
    demo tool's result when the last message is one."""
    asked = [message.text for message in messages if isinstance(message, HumanMessage)]
    latest = asked[-1] if asked else ""
    if len(asked) < 2:
        reply = f"[scripted model] You asked {latest!r}. This is your first question."
    else:
        reply = (
            f"[scripted model] You asked {latest!r}. Before that you asked {asked[-2]!r} "
            f"({len(asked) - 1} earlier questions in this session)."
        )
    if messages and isinstance(messages[-1], ToolMessage):
        reply += f" The {messages[-1].name} tool says: {messages[-1].text}."
    return reply


def _wants_tool(messages: list[BaseMessage], tools: Sequence[Any] | None) -> bool:
    """Call the demo tool first in each turn, when it is offered."""
    offered = {tool.get("function", {}).get("name") for tool in tools or ()}
    return DEMO_TOOL in offered and bool(messages) and isinstance(messages[-1], HumanMessage)


def _tool_call(messages: list[BaseMessage]) -> AIMessageChunk:
    call = tool_call_chunk(
        name=DEMO_TOOL,
        args=json.dumps({"text": messages[-1].text}),
        id=f"call-{uuid4().hex[:12]}",
        index=0,
    )
    return AIMessageChunk(
        content="",
        tool_call_chunks=[call],
        usage_metadata=_usage(messages, ""),
        chunk_position="last",
    )


def _usage(messages: list[BaseMessage], reply: str) -> UsageMetadata:
    prompt = sum(len(message.text.split()) for message in messages)
    completion = len(reply.split())
    return UsageMetadata(
        input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion
    )


class ScriptedChatModel(BaseChatModel):
    """Deterministic stand-in for a provider model; not a real language model."""

    @property
    def _llm_type(self) -> str:
        return "ahp-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, AIMessage]:
        """Offer tools (as OpenAI-style schemas); the model calls only ``word_count``."""
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if _wants_tool(messages, kwargs.get("tools")):
            chunk = _tool_call(messages)
            call = AIMessage(
                content="", tool_calls=chunk.tool_calls, usage_metadata=chunk.usage_metadata
            )
            return ChatResult(generations=[ChatGeneration(message=call)])
        reply = _reply(messages)
        message = AIMessage(content=reply, usage_metadata=_usage(messages, reply))
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        if _wants_tool(messages, kwargs.get("tools")):
            yield ChatGenerationChunk(message=_tool_call(messages))
            return
        reply = _reply(messages)
        words = reply.split(" ")
        for index, word in enumerate(words):
            last = index == len(words) - 1
            chunk = AIMessageChunk(
                content=word if last else word + " ",
                usage_metadata=_usage(messages, reply) if last else None,
            )
            yield ChatGenerationChunk(message=chunk)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._stream(messages, stop, None, **kwargs):
            yield chunk
