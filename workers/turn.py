"""Translate one LangGraph turn's native stream into AHP events and a result."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from agent_harness_protocol import (
    AgentUsage,
    MessageCompleted,
    MessageDelta,
    MessageId,
    MessageRole,
    ProviderDiagnostic,
    StopReason,
    TaskId,
    ToolCallChanged,
    UsageChanged,
    Warning,
    WarningKind,
    WorkId,
)
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, BaseMessageChunk

from wire.event_codec import DIAGNOSTIC, SEMANTIC, diagnostic_to_entry, event_to_entry
from wire.interactions import InteractionPayload
from wire.narrowing import NO_NARROWING, Narrowing
from wire.provider import PROVIDER
from wire.tracing_context import active

from . import spans
from .effects import effect_of
from .event_sink import EventSink
from .graph import TASK_ID, AgentGraph, ResumeKind
from .interrupts import INTERRUPT_KEY, interrupts_of
from .stream_items import Halt, halt_of, notice_of, tool_change_of
from .usage import session_snapshot, usage_of

__all__ = ["TurnResult", "TurnTranslator", "run_turn", "session_snapshot", "usage_of"]

MODEL_NODE = "model"


@dataclass(frozen=True, slots=True)
class TurnResult:
    text: str | None
    usage: AgentUsage
    stop_reason: StopReason
    halt: Halt | None = None
    """The safeguard that ended the turn; ``text`` is then the partial output."""
    asks: tuple[InteractionPayload, ...] = ()
    """What the turn stopped to ask the caller (its interrupts): the task pauses."""


def text_of(message: BaseMessage) -> str | None:
    """The message's text; ``None`` for a response without any text content (no content
    block at all, or none of type text), ``""`` for an empty text."""
    content = message.content
    if isinstance(content, str):
        return content
    texts = [
        block if isinstance(block, str) else str(block.get("text", ""))
        for block in content
        if isinstance(block, str) or block.get("type") == "text"
    ]
    return "".join(texts) if texts else None


def stop_reason_of(message: BaseMessage) -> StopReason:
    finish = str(message.response_metadata.get("finish_reason") or "").lower()
    if finish in {"length", "max_tokens", "content_filter"}:
        return StopReason.PROVIDER_STOPPED
    return StopReason.FINISHED


class TurnTranslator:
    """Feeds the event sink while a turn streams; keeps the turn's usage and messages.

    After each model call: a cumulative ``UsageChanged`` (an unmeasured call makes the
    total unknown, field by field); its text as ``MessageCompleted`` with role
    ``COMMENTARY`` when tool calls follow it. The final answer's ``MessageCompleted``
    (role ``ANSWER``) goes out when the turn finishes. Deltas carry ``ANSWER`` for an
    agent without tools; with tools, ``UNKNOWN`` until the message shows a tool call
    (then ``COMMENTARY``): the completed message's role is the one to trust.
    """

    def __init__(
        self,
        task_id: TaskId,
        sink: EventSink,
        session_usage: AgentUsage,
        diagnostics: bool,
        usage_known: bool = True,
        tools: bool = False,
        usage_before: AgentUsage | None = None,
    ) -> None:
        """``usage_before``: what the task's runs measured before it paused for the
        caller (a run resuming it goes on counting from there)."""
        self._task_id = task_id
        self._sink = sink
        self._session_usage = session_usage
        self._diagnostics = diagnostics
        self._tools = tools
        # A resumed task's lost run may have used tokens nobody measured.
        self._usage = AgentUsage.ZERO if usage_known else AgentUsage.UNKNOWN
        if usage_before is not None:
            self._usage = usage_before + self._usage
        self._usage_reported = False
        self._asks: list[InteractionPayload] = []
        self._final: AIMessage | None = None
        self._pending_answer: AIMessage | None = None
        self._texts: list[str] = []
        self._calling_tools: set[str] = set()
        self._halt: Halt | None = None

    @property
    def usage(self) -> AgentUsage:
        """The turn's usage so far (what a cancelled turn acquired)."""
        return self._usage

    def _emit(self, event: Any) -> None:
        tag, payload = event_to_entry(event)
        self._sink.emit(SEMANTIC, tag, payload)

    def _diagnose(self, name: str, payload: Mapping[str, Any]) -> None:
        if self._diagnostics:
            diagnostic = ProviderDiagnostic(self._task_id, PROVIDER, name, json.dumps(payload))
            tag, body = diagnostic_to_entry(diagnostic)
            self._sink.emit(DIAGNOSTIC, tag, body)

    def _message_id(self, message: BaseMessage) -> MessageId:
        return MessageId(message.id or uuid4().hex)

    def _delta_role(self, chunk: AIMessageChunk, message_id: str) -> MessageRole:
        if not self._tools:
            return MessageRole.ANSWER
        if chunk.tool_call_chunks:
            self._calling_tools.add(message_id)
        return MessageRole.COMMENTARY if message_id in self._calling_tools else MessageRole.UNKNOWN

    def model_chunk(self, chunk: BaseMessageChunk) -> None:
        """A chunk the model just streamed (see ``workers.middleware.CHUNK_OBSERVER``)."""
        if isinstance(chunk, AIMessageChunk):
            message_id = chunk.id or self._task_id.value
            role = self._delta_role(chunk, message_id)
            if chunk.text:
                self._emit(MessageDelta(self._task_id, MessageId(message_id), chunk.text, role))
        if self._diagnostics:
            self._diagnose("messages", {"node": MODEL_NODE, "text": getattr(chunk, "text", "")})

    def observe(self, mode: str, payload: Any) -> None:
        if mode == "updates":
            self._asks.extend(interrupts_of(payload or {}))
            for node, update in (payload or {}).items():
                if node == INTERRUPT_KEY:
                    continue
                messages = (update or {}).get("messages", []) if isinstance(update, dict) else []
                if node == MODEL_NODE:
                    for message in messages:
                        if isinstance(message, AIMessage):
                            self._model_message(message)
                self._diagnose("updates", {"node": str(node), "messages": len(messages)})
        elif mode == "custom":
            effect = effect_of(self._task_id, payload)
            if effect is not None:
                self._emit(effect)
            change = tool_change_of(payload)
            if change is not None:
                self._emit(
                    ToolCallChanged(
                        self._task_id,
                        WorkId(change.work_id or uuid4().hex),
                        change.name,
                        change.status,
                        change.arguments,
                        change.result,
                        change.error,
                    )
                )
            halt = halt_of(payload)
            if halt is not None:
                self._halt = halt
            notice = notice_of(payload)
            if notice is not None:
                self._emit(Warning(self._task_id, WarningKind.OTHER, notice))
            self._diagnose("custom", {"keys": sorted(payload) if isinstance(payload, dict) else []})

    def _model_message(self, message: AIMessage) -> None:
        """One model call's message: its usage, and its text once its role is known."""
        if self._pending_answer is not None:
            # The model was called again after an answer (a pipeline's nudge): that
            # answer was commentary on the way.
            self._complete(self._pending_answer, MessageRole.COMMENTARY)
            self._pending_answer = None
        text = text_of(message)
        if text:
            self._texts.append(text)
        if message.tool_calls:
            self._complete(message, MessageRole.COMMENTARY)
        else:
            self._pending_answer = message
        self._final = message
        self._usage = self._usage + usage_of(message)
        self._report_usage()

    def _complete(self, message: AIMessage, role: MessageRole) -> None:
        text = text_of(message)
        if text:
            self._emit(MessageCompleted(self._task_id, self._message_id(message), text, role))

    def _report_usage(self) -> None:
        session = session_snapshot(self._session_usage + self._usage)
        self._emit(UsageChanged(self._task_id, self._usage, session))
        self._usage_reported = True

    def adopt(self, turn: Iterable[BaseMessage], halt: Halt | None = None) -> None:
        """The turn's messages so far, read back from the checkpoint a lost run wrote. They
        count for the result (text, partial output) but are not reported again."""
        for message in turn:
            if isinstance(message, AIMessage):
                text = text_of(message)
                if text:
                    self._texts.append(text)
                self._final = message
        if halt is not None:
            self._halt = halt

    def finish(self) -> TurnResult:
        final = self._final
        if self._asks:
            # Paused for the caller: the turn's answer is still to come.
            if not self._usage_reported:
                self._report_usage()
            partial = "\n\n".join(self._texts) if self._texts else None
            return TurnResult(partial, self._usage, StopReason.FINISHED, asks=tuple(self._asks))
        if final is None:
            return TurnResult(None, AgentUsage.UNKNOWN, StopReason.PROVIDER_STOPPED)
        if self._pending_answer is not None and self._halt is None:
            self._complete(self._pending_answer, MessageRole.ANSWER)
        elif self._pending_answer is not None:
            self._complete(self._pending_answer, MessageRole.COMMENTARY)
        self._pending_answer = None
        if not self._usage_reported:
            self._report_usage()
        if self._halt is not None:
            partial = "\n\n".join(self._texts) if self._texts else None
            return TurnResult(partial, self._usage, StopReason.FINISHED, self._halt)
        if final.tool_calls:
            # Ended with tool calls unanswered and no safeguard: the run stopped short.
            partial = "\n\n".join(self._texts) if self._texts else None
            return TurnResult(partial, self._usage, StopReason.PROVIDER_STOPPED)
        return TurnResult(text_of(final), self._usage, stop_reason_of(final))


async def run_turn(
    graph: AgentGraph,
    translator: TurnTranslator,
    thread_id: str,
    text: str,
    instructions: str | None,
    metadata: Mapping[str, str],
    *,
    resumed: bool = False,
    lease: object | None = None,
    resume: Mapping[str, Any] | None = None,
    narrowing: Narrowing = NO_NARROWING,
) -> TurnResult:
    """Run the turn. A resumed task whose lost run already checkpointed its whole turn is
    finished from that checkpoint; one whose run stopped mid-turn runs on from there
    (instead of running, and appending its input, again). ``resume`` resumes a turn
    paused at interrupts with the caller's responses."""
    task_id = str(metadata.get(TASK_ID, ""))
    turn_input: str | None = text
    if resume is not None:
        turn_input = None
    elif resumed:
        point = await graph.resume_point(thread_id, task_id)
        if point.kind is not ResumeKind.FRESH:
            translator.adopt(point.turn, point.halt)
        if point.kind is ResumeKind.FINISHED:
            return translator.finish()
        if point.kind is ResumeKind.CONTINUE:
            turn_input = None
    stream = graph.stream_turn(
        thread_id,
        turn_input,
        instructions,
        metadata,
        lease,
        resume,
        narrowing,
        on_chunk=translator.model_chunk,
    )
    if not active():
        async for mode, payload in stream:
            translator.observe(mode, payload)
        return translator.finish()
    with spans.turn(task_id) as span:
        async for mode, payload in stream:
            translator.observe(mode, payload)
            if mode == "updates":
                spans.steps(span, payload)
        return translator.finish()
