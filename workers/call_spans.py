"""The agent middleware that makes a span of every model call and tool call.

Placed just outside ``ToolGuard`` (``workers.graph``): a model call's span covers its gate
and its stream, a tool call's its gate, its approval and its effect. While the worker
does not trace (``wire.tracing_context.active()``) both hooks only hand the call on.

Names and attributes follow OpenTelemetry's GenAI conventions:

- ``chat <model>`` (CLIENT): ``gen_ai.operation.name`` ``chat``, ``gen_ai.request.model``
  (the profile's ``model_id``), and from the model's answer ``gen_ai.usage.input_tokens``,
  ``gen_ai.usage.output_tokens`` (when the model reported them) and
  ``gen_ai.response.finish_reasons``.
- ``execute_tool <tool>`` (INTERNAL): ``gen_ai.operation.name`` ``execute_tool``,
  ``gen_ai.tool.name``, ``gen_ai.tool.call.id``; a tool that failed sets the span's status.
  A call that paused for the caller's approval ends its span with ``ahp.paused``; its
  resumed run has a span of its own.
"""

from __future__ import annotations

import logging
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from wire.tracing_context import active, tracer

from .middleware import ModelHandler, ToolHandler

log = logging.getLogger(__name__)


class CallSpans(AgentMiddleware[Any, Any, Any]):
    def __init__(self, model_id: str) -> None:
        super().__init__()
        self._model_id = model_id

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: ModelHandler
    ) -> ModelResponse[Any]:
        if not active():
            return await handler(request)
        with tracer().start_as_current_span(
            f"chat {self._model_id}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": self._model_id,
            },
        ) as span:
            response = await handler(request)
            _model_answer(span, response)
            return response

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command[Any]:
        if not active():
            return await handler(request)
        call = request.tool_call
        name = str(call.get("name", ""))
        with tracer().start_as_current_span(
            f"execute_tool {name}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": str(call.get("id") or ""),
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                result = await handler(request)
            except GraphInterrupt:
                span.set_attribute("ahp.paused", True)  # waits for the caller
                raise
            except GraphBubbleUp:
                raise
            except BaseException as error:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                raise
            if isinstance(result, ToolMessage) and result.status == "error":
                span.set_status(Status(StatusCode.ERROR, "the tool failed"))
            return result


def _model_answer(span: Span, response: object) -> None:
    try:
        _record_answer(span, response)
    except Exception as error:  # a model's odd metadata never fails its call
        log.warning("the model call's span lacks its answer's attributes: %s", error)


def _record_answer(span: Span, response: object) -> None:
    messages = response.result if isinstance(response, ModelResponse) else [response]
    for message in messages:
        if not isinstance(message, AIMessage):
            continue
        usage = message.usage_metadata
        if usage:
            span.set_attribute("gen_ai.usage.input_tokens", int(usage.get("input_tokens", 0)))
            span.set_attribute("gen_ai.usage.output_tokens", int(usage.get("output_tokens", 0)))
        reason = (message.response_metadata or {}).get("finish_reason")
        if isinstance(reason, str):
            span.set_attribute("gen_ai.response.finish_reasons", [reason])
        return


__all__ = ["CallSpans"]
