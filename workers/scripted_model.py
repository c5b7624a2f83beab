"""A scripted chat model for demos: deterministic, local, and labelled as such.

It streams a reply that quotes the latest request and the one before it, as seen in the
conversation, so a demo shows context carried between the tasks of a session. It
reports token usage by counting whitespace-separated words.

With the model option ``plan`` (profile ``scripted-agent``) it makes the plan's tool
calls first, one per reply (``workers/plans.py``): a string argument the plan leaves open
gets the latest question. Its answer then also quotes what each tool (other than the
pipeline's status tool) returned. Without a plan, or once it is used up, it answers.
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
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr

from wire.pipelines import STATUS_TOOL

from .plans import PlannedCall, next_call, parse_plan, question_index, questions


def _reply(messages: list[BaseMessage]) -> str:
    """Quote the latest question and the one before it (constant size per turn), and what
    the tools called since the latest question returned."""
    asked = questions(messages)
    latest = asked[-1] if asked else ""
    if len(asked) < 2:
        reply = f"[scripted model] You asked {latest!r}. This is your first question."
    else:
        reply = (
            f"[scripted model] You asked {latest!r}. Before that you asked {asked[-2]!r} "
            f"({len(asked) - 1} earlier question{'s' if len(asked) > 2 else ''} in this "
            "session)."
        )
    names: dict[str, str] = {}  # by tool call id: a ToolMessage need not carry its name
    for message in messages[question_index(messages) + 1 :]:
        if isinstance(message, AIMessage):
            names.update({str(call["id"]): call["name"] for call in message.tool_calls})
        elif isinstance(message, ToolMessage):
            name = message.name or names.get(message.tool_call_id)
            if name != STATUS_TOOL:
                reply += f" The {name} tool says: {message.text}."
    return reply


def _offered(tools: Sequence[Any] | None) -> dict[str, dict[str, Any]]:
    """The offered tools' argument schemas by name."""
    return {
        tool["function"]["name"]: tool["function"].get("parameters") or {}
        for tool in tools or ()
        if isinstance(tool, dict) and "function" in tool
    }


def _arguments(planned: PlannedCall, schema: dict[str, Any], question: str) -> dict[str, Any]:
    """The planned arguments, and the latest question for each string one left open."""
    arguments = dict(planned.args)
    for name, prop in (schema.get("properties") or {}).items():
        if name not in arguments and isinstance(prop, dict) and prop.get("type") == "string":
            arguments[name] = question
    return arguments


def _tool_call(
    messages: list[BaseMessage], planned: PlannedCall, schema: dict[str, Any]
) -> AIMessageChunk:
    asked = questions(messages)
    call = tool_call_chunk(
        name=planned.tool,
        args=json.dumps(_arguments(planned, schema, asked[-1] if asked else "")),
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

    plan: str | None = None
    """The tool calls to make, as JSON (see the module docstring)."""

    _plan: tuple[PlannedCall, ...] = PrivateAttr(default=())

    def model_post_init(self, context: Any, /) -> None:
        self._plan = parse_plan(self.plan)

    def _planned(
        self, messages: list[BaseMessage], tools: Sequence[Any] | None
    ) -> AIMessageChunk | None:
        """The tool call of this reply, or ``None`` to answer."""
        offered = _offered(tools)
        planned = next_call(self._plan, messages, offered)
        return None if planned is None else _tool_call(messages, planned, offered[planned.tool])

    @property
    def _llm_type(self) -> str:
        return "ahp-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, AIMessage]:
        """Offer tools (as OpenAI-style schemas); the model calls those its plan names."""
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        chunk = self._planned(messages, kwargs.get("tools"))
        if chunk is not None:
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
        call = self._planned(messages, kwargs.get("tools"))
        if call is not None:
            yield ChatGenerationChunk(message=call)
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
