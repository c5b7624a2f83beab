"""``ask_caller``: the built-in tool through which the agent asks its caller a question.

A profile that declares ``questions=True`` gives its agent this tool. A call interrupts
the run with a question payload (``workers.interrupts.ask_question``): the task pauses
(``AWAITING_RESPONSE``, no worker held) with a ``QuestionRequest``; the caller's
``AnswerResponse`` resumes it on any worker, where the tool node replays and the tool
returns the answer to the model. With ``choices``, only one of them is accepted.
"""

from __future__ import annotations

from typing import Annotated

from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool
from langgraph.config import get_config

from .interrupts import ask_question

ASK_CALLER = "ask_caller"


async def _ask_caller(
    question: str,
    tool_call_id: Annotated[str, InjectedToolCallId],
    choices: list[str] | None = None,
) -> str:
    metadata = get_config().get("metadata", {})
    return ask_question(
        task_id=str(metadata.get("ahp_task_id", "")),
        tool_call_id=tool_call_id,
        tool=ASK_CALLER,
        prompt=question,
        choices=tuple(choices or ()),
    )


def ask_caller_tool() -> BaseTool:
    return StructuredTool.from_function(
        coroutine=_ask_caller,
        name=ASK_CALLER,
        description=(
            "Ask the person who gave you this task a question and wait for the answer. "
            "Give `choices` when only some answers make sense."
        ),
    )


__all__ = ["ASK_CALLER", "ask_caller_tool"]
