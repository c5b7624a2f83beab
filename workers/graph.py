"""The one typed wall around LangGraph: the agent loop (model -> tools -> model) that
langchain's ``create_agent`` builds, on a checkpointer, with our middleware.

Session instructions are not stored in the thread; they are passed per run and put in
front of every model call (``RunInstructions``), so a reopened session may change them.
The input message of a task carries the task id, so a resumed task can tell how far its
lost run got (:meth:`AgentGraph.resume_point`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, BaseMessageChunk, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command

from wire.narrowing import NO_NARROWING, Narrowing
from wire.profiles import AgentProfile

from .approvals import ApprovalRoute
from .call_spans import CallSpans
from .lease import LEASE_CONFIG_KEY
from .middleware import (
    CHUNK_OBSERVER,
    INSTRUCTIONS,
    OFFERED_TOOLS,
    TASK_ID,
    TOKEN_BUDGET,
    GuardedModelCall,
    RunInstructions,
    ToolGuard,
)
from .model_calls import Gate, ModelCalls
from .safeguards import SafeguardMiddleware, halt_in
from .stream_items import Halt

__all__ = [
    "INSTRUCTIONS",
    "TASK_ID",
    "AgentGraph",
    "Gate",
    "ModelCalls",
    "ResumeKind",
    "ResumePoint",
]

STREAM_MODES = ["updates", "custom"]
"""The model's chunks do not come through LangGraph's stream: see ``CHUNK_OBSERVER``."""


class ResumeKind(StrEnum):
    FRESH = "fresh"
    """The thread holds nothing of this task: run it from its input."""
    CONTINUE = "continue"
    """The thread stopped inside this task's turn: run on from the checkpoint."""
    FINISHED = "finished"
    """The thread holds this task's finished turn: nothing to run."""


@dataclass(frozen=True, slots=True)
class ResumePoint:
    kind: ResumeKind
    turn: tuple[BaseMessage, ...] = ()
    """The messages after the task's input, as checkpointed."""
    halt: Halt | None = None


class AgentGraph:
    """A compiled agent shared by every session a worker runs with one profile."""

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        profile: AgentProfile,
        checkpointer: BaseCheckpointSaver[Any],
        calls: ModelCalls,
        *,
        approvals: ApprovalRoute | None = None,
        steering: Sequence[AgentMiddleware[Any, Any, Any]] = (),
    ) -> None:
        """``steering``: middleware placed between the instructions and the safeguards
        (task pipelines)."""
        self.has_tools = bool(tools)
        # A model-only turn is one model call: only a token budget can bound it. Without
        # one, the safeguard hooks (two graph nodes per call) are left out.
        guarded = bool(tools) or bool(steering) or profile.safeguards.token_budget is not None
        middleware: list[AgentMiddleware[Any, Any, Any]] = [
            RunInstructions(frozenset(spec.name for spec in profile.tools)),
            *steering,
            *([SafeguardMiddleware(profile.safeguards)] if guarded else []),
            # Spans of the model and tool calls (only while tracing: workers.call_spans).
            CallSpans(profile.model_id or profile.name),
            ToolGuard(
                calls, {spec.name: spec for spec in profile.tools}, approvals or ApprovalRoute()
            ),
            GuardedModelCall(calls),
        ]
        # A model-only turn is one step: its checkpoint is written once, at the end. An
        # agent with tools checkpoints every step, so a lost run resumes after the last
        # tool whose result was checkpointed instead of repeating its effect.
        self._durability = "sync" if tools or steering else "exit"
        self._graph: Any = create_agent(
            model, list(tools), middleware=middleware, checkpointer=checkpointer
        )

    @staticmethod
    def _config(thread_id: str) -> RunnableConfig:
        return {"configurable": {"thread_id": thread_id}}

    async def resume_point(self, thread_id: str, task_id: str) -> ResumePoint:
        """How far the thread got with task ``task_id``'s turn (a resumed task asks)."""
        if not task_id:
            return ResumePoint(ResumeKind.FRESH)
        snapshot = await self._graph.aget_state(self._config(thread_id))
        values: Mapping[str, Any] = snapshot.values or {}
        messages: list[BaseMessage] = list(values.get("messages", []))
        for index, message in enumerate(messages):
            if isinstance(message, HumanMessage) and message.id == task_id:
                turn = tuple(messages[index + 1 :])
                # ``next`` leaves out the step's nodes whose writes were kept already: a run
                # lost after those writes and before the step's checkpoint left a turn
                # whose ``next`` reads empty, yet ``tasks`` still holds that step.
                if snapshot.next or snapshot.tasks:
                    return ResumePoint(ResumeKind.CONTINUE, turn)
                return ResumePoint(ResumeKind.FINISHED, turn, halt_in(dict(values), task_id))
        return ResumePoint(ResumeKind.FRESH)

    async def pending_interrupts(self, thread_id: str) -> tuple[Any, ...]:
        """The interrupts the thread's latest checkpoint stopped at (LangGraph's
        ``Interrupt`` objects: ``id``, ``value``)."""
        snapshot = await self._graph.aget_state(self._config(thread_id))
        return tuple(snapshot.interrupts or ())

    def stream_turn(
        self,
        thread_id: str,
        text: str | None,
        instructions: str | None,
        metadata: Mapping[str, str],
        lease: object | None = None,
        resume: Mapping[str, Any] | None = None,
        narrowing: Narrowing = NO_NARROWING,
        on_chunk: Callable[[BaseMessageChunk], None] | None = None,
    ) -> AsyncIterator[tuple[str, Any]]:
        """Run one turn, or (``text=None``) run on from the thread's checkpoint; yields
        LangGraph's native ``(mode, payload)`` stream items.

        ``lease`` (the run's ``workers.lease.SessionLease``) travels in the run's config to
        every checkpointer call of this run: the saver fences its writes with it.
        ``resume`` (``{interrupt id: resume value}``) resumes a turn paused at interrupts
        with the caller's responses. ``narrowing`` (the session's and the task's) limits
        the tools offered and the token budget of every step. ``on_chunk`` is called with
        each chunk the model streams, the moment it arrives."""
        configurable: dict[str, Any] = {
            "thread_id": thread_id,
            INSTRUCTIONS: instructions,
            OFFERED_TOOLS: None if narrowing.tools is None else list(narrowing.tools),
            TOKEN_BUDGET: narrowing.token_budget,
            CHUNK_OBSERVER: on_chunk,
        }
        if lease is not None:
            configurable[LEASE_CONFIG_KEY] = lease
        config: RunnableConfig = {"configurable": configurable, "metadata": dict(metadata)}
        task_id = metadata.get(TASK_ID) or None
        graph_input: Any = (
            None if text is None else {"messages": [HumanMessage(content=text, id=task_id)]}
        )
        if resume is not None:
            graph_input = Command(resume=dict(resume))
        stream: AsyncIterator[tuple[str, Any]] = self._graph.astream(
            graph_input, config, stream_mode=STREAM_MODES, durability=self._durability
        )
        return stream
