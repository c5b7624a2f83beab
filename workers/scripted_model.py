"""A scripted chat model for demos: deterministic, local, and labelled as such.

It streams a reply that quotes the latest request and the one before it, as seen in the
conversation, so a demo shows context carried between the tasks of a session. It
reports token usage by counting whitespace-separated words.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult


def _reply(messages: list[BaseMessage]) -> str:
    """Quote the latest question and the one before it (constant size per turn)."""
    asked = [message.text for message in messages if isinstance(message, HumanMessage)]
    latest = asked[-1] if asked else ""
    if len(asked) < 2:
        return f"[scripted model] You asked {latest!r}. This is your first question."
    return (
        f"[scripted model] You asked {latest!r}. Before that you asked {asked[-2]!r} "
        f"({len(asked) - 1} earlier questions in this session)."
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

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
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
