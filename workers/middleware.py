"""The agent middleware that carries the worker's guarantees into ``create_agent``.

Order in the agent (first is outermost): :class:`RunInstructions`, then any pipeline
(steering) middleware, the safeguards, :class:`ToolGuard` and, innermost,
:class:`GuardedModelCall`.

- :class:`RunInstructions` puts the session's instructions (passed per run, not stored in
  the thread) in front of every model call, so a reopened session may change them and
  middleware further in can add to them.
- :class:`GuardedModelCall` runs the step-boundary gate and then the model call itself,
  through ``astream`` and registered with :class:`ModelCalls`: a delivered cancellation
  reaches exactly that call, and a model that finishes despite it returns its message
  (create_agent's own handler uses ``ainvoke``, whose gather would turn that into a
  ``CancelledError``).
- :class:`ToolGuard` runs the gate before every tool effect, asks the approval route for
  approval-gated tools, counts each attempt of a call and applies the tool's declared
  delivery to a call whose worker was lost mid-call (``workers.tool_delivery``), and
  reports each attempt's status changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from agent_harness_protocol import WorkStatus
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    BaseMessageChunk,
    SystemMessage,
    ToolMessage,
    message_chunk_to_message,
)
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from wire.backoff import CONNECTION_ERRORS
from wire.profiles import ToolApproval, ToolDelivery, ToolSpec

from .approvals import ApprovalRoute
from .effects import report_effect
from .errors import WorkerError
from .model_calls import ModelCalls
from .model_streams import closing_model_streams, track_streams
from .stream_items import ToolChange, canonical_arguments, report_notice, report_tool_change
from .tool_delivery import attempt_work_id, begin_attempt, call_key, with_idempotency_key

T = TypeVar("T")

INSTRUCTIONS = "ahp_instructions"
TASK_ID = "ahp_task_id"
OFFERED_TOOLS = "ahp_offered_tools"
"""Run config: the names of the profile's tools this run may offer (``None``: all)."""
TOKEN_BUDGET = "ahp_token_budget"
"""Run config: a narrowed token budget per task (``None``: the profile's)."""
CHUNK_OBSERVER = "ahp_chunk_observer"
"""Run config: called with each chunk the model streams, as it arrives (the run's
``TurnTranslator.model_chunk``). Handing chunks over here instead of through LangGraph's
``messages`` stream mode spares every token a hop across the event loop's self-pipe."""

ModelHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
ToolHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]


def run_key(config: RunnableConfig) -> str:
    """The run's key in :class:`ModelCalls`: its task id."""
    return str(config.get("metadata", {}).get(TASK_ID, ""))


def offered(declared: frozenset[str], name: str) -> bool:
    """Whether this run may offer (and run) tool ``name``: tools the profile declares may
    be narrowed away; tools of other middleware (a pipeline's status tool) may not."""
    allowed = get_config().get("configurable", {}).get(OFFERED_TOOLS)
    return allowed is None or name not in declared or name in allowed


class RunInstructions(AgentMiddleware[Any, Any, Any]):
    """Outermost: the session's instructions, from the run's config, as system message;
    the profile's tools narrowed to those this run may offer."""

    def __init__(self, declared: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self._declared = declared

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: ModelHandler
    ) -> ModelResponse[Any]:
        configurable = get_config().get("configurable", {})
        instructions = configurable.get(INSTRUCTIONS)
        if instructions is not None:
            request = request.override(system_message=SystemMessage(content=instructions))
        if configurable.get(OFFERED_TOOLS) is not None:
            tools = [
                tool
                for tool in request.tools
                if isinstance(tool, dict) or offered(self._declared, tool.name)
            ]
            request = request.override(tools=tools)
        return await handler(request)


class GuardedModelCall(AgentMiddleware[Any, Any, Any]):
    """Innermost: the gate, then the model call registered with :class:`ModelCalls`."""

    def __init__(self, calls: ModelCalls) -> None:
        super().__init__()
        self._calls = calls

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: ModelHandler
    ) -> ModelResponse[Any]:
        config = get_config()
        key = run_key(config)
        # Step boundary: a cancellation recorded by now wins; nothing awaits between
        # the check and the model call's registration, where a later one is delivered.
        await self._calls.before_call(key)
        if request.response_format is not None:
            # Structured output is create_agent's own handling: keep its handler.
            self._calls.mark_started(key)
            return await self._calls.run(key, _awaited(handler(request)))
        message = await self._calls.run(key, self._stream_model(key, request, config))
        return ModelResponse(result=[message])

    async def _stream_model(
        self, key: str, request: ModelRequest[Any], config: RunnableConfig
    ) -> BaseMessage:
        """Call the model through ``astream``: unlike ``ainvoke`` (which gathers), a model
        that finishes despite a cancellation really returns its message."""
        model: Any = request.model
        if isinstance(model, BaseChatModel):
            track_streams(model)  # its provider stream is closed when this call ends
        if request.tools:
            model = model.bind_tools(
                request.tools, tool_choice=request.tool_choice, **request.model_settings
            )
        elif request.model_settings:
            model = model.bind(**request.model_settings)
        messages: list[BaseMessage] = list(request.messages)
        if request.system_message is not None:
            messages.insert(0, request.system_message)
        chunks: list[BaseMessageChunk] = []
        finished = False
        observe: Callable[[BaseMessageChunk], None] | None = config.get("configurable", {}).get(
            CHUNK_OBSERVER
        )
        stream = model.astream(messages, config)  # creating it runs nothing yet
        # Started: the first advance of the stream enters the chat model. Nothing awaits
        # in between, so a call cancelled before this never reached the provider.
        self._calls.mark_started(key)
        try:
            async with closing_model_streams():
                async for chunk in stream:
                    if observe is not None:
                        observe(chunk)  # first: its event leaves before the merge below
                    chunks.append(chunk)  # merged once at the end: merging each is quadratic
                    finished = getattr(chunk, "chunk_position", None) == "last"
        except asyncio.CancelledError:
            # The model had already delivered its last chunk: completion won the race.
            if not finished:
                raise
        if not chunks:
            raise RuntimeError("the model streamed no message")
        final = chunks[0] + chunks[1:] if len(chunks) > 1 else chunks[0]
        message = message_chunk_to_message(final)
        if not isinstance(message, AIMessage):
            raise RuntimeError(f"the model streamed a {type(message).__name__}")
        return message


async def _awaited(call: Awaitable[T]) -> T:
    return await call


_PASS_THROUGH: tuple[type[BaseException], ...] = (GraphBubbleUp, WorkerError, *CONNECTION_ERRORS)
"""Errors of a tool call that end the run instead of going back to the model: LangGraph's
interrupts, the worker's own stops (cancellation, a lost lease), Redis outages."""


class ToolGuard(AgentMiddleware[Any, Any, Any]):
    """The gate before every tool effect, approvals, and each call's reported status."""

    def __init__(
        self, calls: ModelCalls, tools: Mapping[str, ToolSpec], approvals: ApprovalRoute
    ) -> None:
        super().__init__()
        self._calls = calls
        self._tools = dict(tools)
        self._approvals = approvals

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command[Any]:
        key = run_key(get_config())
        call = request.tool_call
        work_id = str(call.get("id") or "")
        name = call["name"]
        arguments = canonical_arguments(call.get("args", {}))
        spec = self._tools.get(name)
        if not offered(frozenset(self._tools), name):
            message = f"the tool {name} is not offered to this task"
            report_tool_change(
                ToolChange(work_id, name, WorkStatus.FAILED, arguments, None, message)
            )
            return ToolMessage(content=message, tool_call_id=work_id, name=name, status="error")
        await self._calls.before_call(key)
        if spec is not None and spec.approval is ToolApproval.REQUIRED:
            decision = await self._approvals.authorize(request, spec)
            if not decision.approved:
                declined = ToolChange(
                    work_id, name, WorkStatus.DECLINED, arguments, None, decision.message
                )
                report_tool_change(declined)
                return ToolMessage(
                    content=decision.message, tool_call_id=work_id, name=name, status="error"
                )
            # The decision may have taken long (a paused task): the effect's own boundary.
            await self._calls.before_call(key)
        attempt = await begin_attempt(key, work_id) if work_id else 1
        if attempt > 1:
            lost = _lost_attempt(work_id, name, arguments, attempt, spec)
            if lost is not None:
                return lost
        call_id, work_id = work_id, attempt_work_id(work_id, attempt)
        request = with_idempotency_key(request, call_key(key, call_id))
        report_tool_change(ToolChange(work_id, name, WorkStatus.STARTED, arguments))
        try:
            result = await handler(request)
        except _PASS_THROUGH:
            raise
        except Exception as error:
            message = f"{type(error).__name__}: {error}"
            report_tool_change(
                ToolChange(work_id, name, WorkStatus.FAILED, arguments, None, message)
            )
            return ToolMessage(
                content=f"the tool failed: {message}",
                tool_call_id=call_id,
                name=name,
                status="error",
            )
        output: str | None
        if isinstance(result, ToolMessage) and result.status == "error":
            report_tool_change(
                ToolChange(work_id, name, WorkStatus.FAILED, arguments, None, result.text)
            )
            status, output = WorkStatus.FAILED, str(result.text)
        else:
            text = result.text if isinstance(result, ToolMessage) else None
            report_tool_change(ToolChange(work_id, name, WorkStatus.COMPLETED, arguments, text))
            status, output = WorkStatus.COMPLETED, None if text is None else str(text)
        if spec is not None and spec.approval is ToolApproval.REQUIRED:
            # An approved effect: reported as such, under the attempt's work id (for the
            # first attempt, the call id its approval named).
            report_effect(work_id, status, description=spec.effect, output=output)
        return result


def _lost_attempt(
    call_id: str, name: str, arguments: str, attempt: int, spec: ToolSpec | None
) -> ToolMessage | None:
    """An earlier attempt of this call began and its worker was lost before the result was
    kept: close that attempt on the caller's stream and apply the tool's delivery. Returns
    the tool result of an ``at_most_once`` call (it does not run again), or ``None``: run
    it as attempt ``attempt``."""
    previous = attempt_work_id(call_id, attempt - 1)
    lost = (
        f"attempt {attempt - 1} of tool call {call_id} ({name}) was lost with the worker "
        "running it; whether its effect happened is unknown"
    )
    report_tool_change(ToolChange(previous, name, WorkStatus.FAILED, arguments, None, lost))
    if spec is not None and spec.delivery is ToolDelivery.AT_MOST_ONCE:
        report_notice(f"{lost}; {name} is at-most-once, so it was not run again")
        return ToolMessage(
            content="the outcome of this tool call is unknown: the worker running it was "
            "lost mid-call, and the tool is at-most-once, so it was not run again",
            tool_call_id=call_id,
            name=name,
            status="error",
        )
    report_notice(
        f"{lost}; {name} is at-least-once, so it runs again as attempt {attempt} "
        f"(work id {attempt_work_id(call_id, attempt)}) with the same idempotency key"
    )
    return None
