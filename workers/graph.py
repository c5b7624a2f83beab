"""The one typed wall around LangGraph: a START -> model -> END graph on a checkpointer.

Session instructions are not stored in the thread; they are passed per run and
prepended to the history for each model call, so a reopened session may change them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    BaseMessageChunk,
    HumanMessage,
    SystemMessage,
    message_chunk_to_message,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from .errors import ModelCallCancelledError
from .lease import LEASE_CONFIG_KEY

INSTRUCTIONS = "ahp_instructions"
TASK_ID = "ahp_task_id"


Gate = Callable[[], Awaitable[None]]
"""A run's step-boundary check: returns, or raises to stop the run before the step."""


class ModelCalls:
    """The model call each run is in, so cancellation can be delivered to exactly it.

    Cancelling the model call (rather than the whole graph run) lets a model that
    finishes anyway complete its turn: completion then wins the race against cancel.

    Each run may register a gate, awaited before its model is invoked: a recorded
    cancellation stops the run there, whether or not a ``CancelledError`` reached it.
    A call counts as started only once the chat model's stream is first advanced, the
    first moment the provider can be reached.
    """

    def __init__(self) -> None:
        self._calls: dict[str, asyncio.Task[BaseMessage]] = {}
        self._started: set[str] = set()
        self._gates: dict[str, Gate] = {}

    def guard(self, key: str, gate: Gate) -> None:
        """Check ``gate`` before every model call of run ``key`` (until :meth:`forget`)."""
        self._gates[key] = gate

    async def before_call(self, key: str) -> None:
        gate = self._gates.get(key)
        if gate is not None:
            await gate()

    async def run(self, key: str, call: Coroutine[Any, Any, BaseMessage]) -> BaseMessage:
        task = asyncio.create_task(call)
        self._calls[key] = task
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                # The delivered cancellation ended the model call; end the run with it.
                raise ModelCallCancelledError(key) from None
            task.cancel()
            raise
        finally:
            if self._calls.get(key) is task:
                del self._calls[key]

    def mark_started(self, key: str) -> None:
        self._started.add(key)

    def cancel(self, key: str) -> bool:
        """Cancel the run's model call if one is in progress; whether one was."""
        task = self._calls.get(key)
        if task is None or task.done():
            return False
        task.cancel()
        return True

    def started(self, key: str) -> bool:
        return key in self._started

    def forget(self, key: str) -> None:
        self._started.discard(key)
        self._gates.pop(key, None)


class ModelGraph:
    """A compiled single-model graph shared by every session a worker runs."""

    def __init__(
        self, model: BaseChatModel, checkpointer: BaseCheckpointSaver[Any], calls: ModelCalls
    ) -> None:
        self._model = model
        self._calls = calls
        builder = StateGraph(MessagesState)
        builder.add_node("model", self._call_model)
        builder.add_edge(START, "model")
        builder.add_edge("model", END)
        self._graph: Any = builder.compile(checkpointer=checkpointer)

    async def _call_model(self, state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        history: list[AnyMessage] = list(state["messages"])
        messages: list[BaseMessage] = list(history)
        instructions = config.get("configurable", {}).get(INSTRUCTIONS)
        if instructions is not None:
            messages.insert(0, SystemMessage(content=instructions))
        key = str(config.get("metadata", {}).get(TASK_ID, ""))
        # Step boundary: a cancellation recorded by now wins; nothing awaits between
        # the check and the model call's registration, where a later one is delivered.
        await self._calls.before_call(key)
        response = await self._calls.run(key, self._stream_model(key, messages, config))
        return {"messages": [response]}

    async def _stream_model(
        self, key: str, messages: list[BaseMessage], config: RunnableConfig
    ) -> BaseMessage:
        """Call the model through ``astream``: unlike ``ainvoke`` (which gathers), a model
        that finishes despite a cancellation really returns its message."""
        final: BaseMessageChunk | None = None
        finished = False
        stream = self._model.astream(messages, config)  # creating it runs nothing yet
        # Started: the first advance of the stream enters the chat model. Nothing awaits
        # in between, so a call cancelled before this never reached the provider.
        self._calls.mark_started(key)
        try:
            async for chunk in stream:
                final = chunk if final is None else final + chunk
                finished = getattr(chunk, "chunk_position", None) == "last"
        except asyncio.CancelledError:
            # The model had already delivered its last chunk: completion won the race.
            if not finished:
                raise
        if final is None:
            raise RuntimeError("the model streamed no message")
        return message_chunk_to_message(final)

    async def checkpointed_answer(self, thread_id: str, task_id: str) -> AIMessage | None:
        """The answer to task ``task_id``'s input if the thread's latest checkpoint has it."""
        if not task_id:
            return None
        snapshot = await self._graph.aget_state({"configurable": {"thread_id": thread_id}})
        messages: list[BaseMessage] = list((snapshot.values or {}).get("messages", []))
        for index, message in enumerate(messages):
            if isinstance(message, HumanMessage) and message.id == task_id:
                answer: AIMessage | None = None
                for later in messages[index + 1 :]:
                    if isinstance(later, HumanMessage):
                        break
                    if isinstance(later, AIMessage):
                        answer = later
                return answer
        return None

    async def pending_interrupts(self, thread_id: str) -> tuple[Any, ...]:
        """The interrupts the thread's latest checkpoint stopped at (LangGraph's
        ``Interrupt`` objects: ``id``, ``value``)."""
        snapshot = await self._graph.aget_state({"configurable": {"thread_id": thread_id}})
        return tuple(snapshot.interrupts or ())

    def stream_turn(
        self,
        thread_id: str,
        text: str,
        instructions: str | None,
        metadata: Mapping[str, str],
        lease: object | None = None,
        resume: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[tuple[str, Any]]:
        """Run one turn; yields LangGraph's native ``(mode, payload)`` stream items.

        ``lease`` (the run's ``workers.lease.SessionLease``) travels in the run's config to
        every checkpointer call of this run: the saver fences its writes with it.
        ``resume`` (``{interrupt id: resume value}``) resumes a paused turn from its
        interrupts instead of starting one with ``text``."""
        configurable: dict[str, Any] = {"thread_id": thread_id, INSTRUCTIONS: instructions}
        if lease is not None:
            configurable[LEASE_CONFIG_KEY] = lease
        config: RunnableConfig = {"configurable": configurable, "metadata": dict(metadata)}
        # The input message carries the task id, so a resumed task can tell whether its
        # lost run already checkpointed this turn (see ``checkpointed_answer``).
        task_id = metadata.get(TASK_ID) or None
        turn_input: Any = {"messages": [HumanMessage(content=text, id=task_id)]}
        if resume is not None:
            turn_input = Command(resume=dict(resume))
        stream: AsyncIterator[tuple[str, Any]] = self._graph.astream(
            turn_input,
            config,
            stream_mode=["messages", "updates", "custom"],
            durability="exit",
        )
        return stream
