"""Translate one LangGraph turn's native stream into AHP events and a result."""

from __future__ import annotations

import json
from collections.abc import Mapping
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
    UsageChanged,
)
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage

from wire.codec import DIAGNOSTIC, SEMANTIC, diagnostic_to_entry, event_to_entry
from wire.interactions import InteractionPayload
from wire.provider import PROVIDER

from .effects import effect_of
from .event_sink import EventSink
from .graph import TASK_ID, ModelGraph
from .interrupts import INTERRUPT_KEY, interrupts_of


@dataclass(frozen=True, slots=True)
class TurnResult:
    text: str | None
    usage: AgentUsage
    stop_reason: StopReason
    asks: tuple[InteractionPayload, ...] = ()
    """What the turn stopped to ask the caller (its interrupts): the task pauses."""


def usage_of(message: BaseMessage) -> AgentUsage:
    """``usage_metadata`` as AgentUsage; a missing field is unknown (None), never zero."""
    metadata: Mapping[str, Any] | None = getattr(message, "usage_metadata", None)
    if not metadata:
        return AgentUsage.UNKNOWN
    input_details: Mapping[str, Any] = metadata.get("input_token_details") or {}
    output_details: Mapping[str, Any] = metadata.get("output_token_details") or {}
    return AgentUsage(
        input_tokens=metadata.get("input_tokens"),
        cached_input_tokens=input_details.get("cache_read"),
        output_tokens=metadata.get("output_tokens"),
        reasoning_tokens=output_details.get("reasoning"),
        total_tokens=metadata.get("total_tokens"),
        cache_write_input_tokens=input_details.get("cache_creation"),
    )


def session_snapshot(usage: AgentUsage) -> AgentUsage | None:
    """The session usage to report: none at all when nothing of it was ever measured
    (every field unknown), as the settle script reports it."""
    return None if usage == AgentUsage.UNKNOWN else usage


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
    """Feeds the event sink while a turn streams; remembers the final AI message."""

    def __init__(
        self,
        task_id: TaskId,
        sink: EventSink,
        session_usage: AgentUsage,
        diagnostics: bool,
        usage_known: bool = True,
    ) -> None:
        self._task_id = task_id
        self._sink = sink
        self._session_usage = session_usage
        self._diagnostics = diagnostics
        self._usage_known = usage_known
        self._final: AIMessage | None = None
        self._asks: list[InteractionPayload] = []

    def _emit(self, event: Any) -> None:
        tag, payload = event_to_entry(event)
        self._sink.emit(SEMANTIC, tag, payload)

    def _diagnose(self, name: str, payload: Mapping[str, Any]) -> None:
        if self._diagnostics:
            diagnostic = ProviderDiagnostic(self._task_id, PROVIDER, name, json.dumps(payload))
            tag, body = diagnostic_to_entry(diagnostic)
            self._sink.emit(DIAGNOSTIC, tag, body)

    def observe(self, mode: str, payload: Any) -> None:
        if mode == "messages":
            chunk, metadata = payload
            node = str(metadata.get("langgraph_node", ""))
            if isinstance(chunk, AIMessageChunk) and chunk.text:
                message_id = MessageId(chunk.id or self._task_id.value)
                self._emit(MessageDelta(self._task_id, message_id, chunk.text, MessageRole.ANSWER))
            self._diagnose("messages", {"node": node, "text": getattr(chunk, "text", "")})
        elif mode == "custom":
            effect = effect_of(self._task_id, payload)
            if effect is not None:
                self._emit(effect)
        elif mode == "updates":
            self._asks.extend(interrupts_of(payload or {}))
            for node, update in (payload or {}).items():
                if node == INTERRUPT_KEY:
                    continue
                messages = (update or {}).get("messages", []) if isinstance(update, dict) else []
                for message in messages:
                    if isinstance(message, AIMessage):
                        self._final = message
                self._diagnose("updates", {"node": str(node), "messages": len(messages)})

    def adopt(self, final: AIMessage) -> None:
        """The turn's answer, read back from the checkpoint a lost run wrote."""
        self._final = final

    def finish(self) -> TurnResult:
        final = self._final
        if self._asks:
            # Paused for the caller: the answer is still to come.
            usage = (
                usage_of(final)
                if final is not None and self._usage_known
                else (AgentUsage.ZERO if self._usage_known else AgentUsage.UNKNOWN)
            )
            return TurnResult(None, usage, StopReason.FINISHED, tuple(self._asks))
        if final is None:
            return TurnResult(None, AgentUsage.UNKNOWN, StopReason.PROVIDER_STOPPED)
        text = text_of(final)
        # A resumed task's lost run may have used tokens nobody measured.
        usage = usage_of(final) if self._usage_known else AgentUsage.UNKNOWN
        if text is not None:
            message_id = MessageId(final.id or uuid4().hex)
            self._emit(MessageCompleted(self._task_id, message_id, text, MessageRole.ANSWER))
        session = session_snapshot(self._session_usage + usage)
        self._emit(UsageChanged(self._task_id, usage, session))
        return TurnResult(text, usage, stop_reason_of(final))


async def run_turn(
    graph: ModelGraph,
    translator: TurnTranslator,
    thread_id: str,
    text: str,
    instructions: str | None,
    metadata: Mapping[str, str],
    *,
    resumed: bool = False,
    lease: object | None = None,
    resume: Mapping[str, Any] | None = None,
) -> TurnResult:
    """Run the turn; a resumed task whose lost run already checkpointed its answer is
    finished from that checkpoint instead of running (and appending its input) again.
    ``resume`` resumes a turn paused at interrupts with the caller's responses."""
    task_id = str(metadata.get(TASK_ID, ""))
    if resumed and resume is None:
        answer = await graph.checkpointed_answer(thread_id, task_id)
        if answer is not None:
            translator.adopt(answer)
            return translator.finish()
    stream = graph.stream_turn(thread_id, text, instructions, metadata, lease, resume)
    async for mode, payload in stream:
        translator.observe(mode, payload)
    return translator.finish()
