"""The one typed wall around LangGraph: a START -> model -> END graph on a checkpointer.

Session instructions are not stored in the thread; they are passed per run and
prepended to the history for each model call, so a reopened session may change them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph

INSTRUCTIONS = "ahp_instructions"


class ModelGraph:
    """A compiled single-model graph shared by every session a worker runs."""

    def __init__(self, model: BaseChatModel, checkpointer: BaseCheckpointSaver[Any]) -> None:
        self._model = model
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
        response = await self._model.ainvoke(messages, config)
        return {"messages": [response]}

    def stream_turn(
        self,
        thread_id: str,
        text: str,
        instructions: str | None,
        metadata: Mapping[str, str],
    ) -> AsyncIterator[tuple[str, Any]]:
        """Run one turn; yields LangGraph's native ``(mode, payload)`` stream items."""
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id, INSTRUCTIONS: instructions},
            "metadata": dict(metadata),
        }
        stream: AsyncIterator[tuple[str, Any]] = self._graph.astream(
            {"messages": [HumanMessage(content=text)]},
            config,
            stream_mode=["messages", "updates"],
        )
        return stream
