"""What a call of the controlled model (``tests.support.controlled_model``) answers
with when its script or plan says so: the reply chunk, a tool call, the usage reported.

Without a script, the profile option ``plan`` (a JSON list) fixes each model call of a
task by its position in the turn (the number of AI messages after the last human one):
``{"tool_call": {"name", "args", "more"?}, "text"?, "usage"?}`` (``more``: further calls
``{"name", "args"}`` in the same message) or ``{"reply": text, "usage"?}``.

A scripted or planned ``usage`` replaces the profile's token counts for that call:
``null`` reports none, a partial mapping (say, only ``input_tokens``) reports what a
provider measured in its raw ``token_usage`` (LangChain's ``usage_metadata`` needs all
three counts).
"""

from __future__ import annotations

import json
from typing import Any
from uuid import uuid4

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk


def usage_fields(usage: Any) -> tuple[UsageMetadata | None, dict[str, Any]]:
    """A scripted usage as ``(usage_metadata, response_metadata)``: complete counts go in
    ``usage_metadata``, partial ones in a raw ``token_usage`` report."""
    if usage is None:
        return None, {}
    counts = {key: usage.get(key) for key in ("input_tokens", "output_tokens", "total_tokens")}
    if all(isinstance(value, int) for value in counts.values()):
        return UsageMetadata(
            input_tokens=counts["input_tokens"],
            output_tokens=counts["output_tokens"],
            total_tokens=counts["total_tokens"],
        ), {}
    return None, {"token_usage": {k: v for k, v in counts.items() if isinstance(v, int)}}


def turn_position(messages: list[BaseMessage]) -> int:
    """How many model messages the current turn already holds."""
    position = 0
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        if isinstance(message, AIMessage):
            position += 1
    return position


def planned_reply(
    plan: str | None, messages: list[BaseMessage], default: UsageMetadata | None
) -> ChatGenerationChunk:
    """The chunk a call answers with by its position in the turn, under the profile's
    ``plan`` (``default``: the profile's token counts)."""
    steps = json.loads(plan or "[]")
    step = steps[min(turn_position(messages), len(steps) - 1)]
    usage, raw = usage_fields(step.get("usage", default))
    call = step.get("tool_call")
    if call is not None:
        return tool_call_reply(
            {
                "name": call["name"],
                "args": call.get("args", {}),
                "text": step.get("text"),
                "more": call.get("more"),
            },
            usage,
            raw,
        )
    return ChatGenerationChunk(
        message=AIMessageChunk(
            content=step["reply"],
            usage_metadata=usage,
            response_metadata={"finish_reason": "stop", **raw},
            chunk_position="last",
        )
    )


def tool_call_reply(
    command: dict[str, Any], usage: UsageMetadata | None, raw: dict[str, Any]
) -> ChatGenerationChunk:
    """A call that ends with a tool call (``command``: a script's ``tool_call``, or a planned
    one), and with ``more`` further calls in the same message."""
    call_id = str(command.get("id") or f"call-{uuid4().hex[:16]}")
    return ChatGenerationChunk(
        message=AIMessageChunk(
            content=command.get("text") or "",
            tool_call_chunks=[
                tool_call_chunk(
                    name=command["name"],
                    args=json.dumps(command.get("args", {})),
                    id=call_id,
                    index=0,
                ),
                *(
                    tool_call_chunk(
                        name=more["name"],
                        args=json.dumps(more.get("args", {})),
                        id=f"{call_id}-{index}",
                        index=index,
                    )
                    for index, more in enumerate(command.get("more") or (), 1)
                ),
            ],
            usage_metadata=usage,
            response_metadata={"finish_reason": "tool_calls", **raw},
            chunk_position="last",
        )
    )


__all__ = ["planned_reply", "tool_call_reply", "turn_position", "usage_fields"]
