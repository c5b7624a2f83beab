"""The offline model's prompt and tool planning (the model itself needs the ``local`` extra,
which CI does not install; these parts run without it)."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool

from workers.local_model import DEFAULT_SYSTEM, answer_hint, chatml, planned_call


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


@tool
def note(text: str) -> str:
    """Write a note."""
    return "noted"


TOOLS = [convert_to_openai_tool(lookup), convert_to_openai_tool(note)]


def test_the_prompt_is_chatml_open_for_the_assistant_with_tool_turns_spelled_out() -> None:
    call = {"name": "lookup", "args": {"city": "Oslo"}, "id": "c1"}
    prompt = chatml(
        [
            SystemMessage("Be brief."),
            HumanMessage("Weather in Oslo?"),
            AIMessage("", tool_calls=[call]),
            ToolMessage("sunny in Oslo", tool_call_id="c1", name="lookup"),
        ]
    )
    assert prompt == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWeather in Oslo?<|im_end|>\n"
        '<|im_start|>assistant\nI call lookup with {"city": "Oslo"}.<|im_end|>\n'
        "<|im_start|>user\nThe tool lookup returned: sunny in Oslo<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert chatml([HumanMessage("hi")]).startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM}")


def test_a_planned_tool_is_called_once_per_task_then_the_model_answers() -> None:
    asked = [HumanMessage("Weather in Oslo?")]
    assert planned_call(asked, TOOLS, None, "lookup") == TOOLS[0]
    called = [*asked, AIMessage("", tool_calls=[{"name": "lookup", "args": {}, "id": "c"}])]
    assert planned_call(called, TOOLS, None, "lookup") is None
    # The next task of the session plans its call again.
    assert planned_call([*called, HumanMessage("And Rome?")], TOOLS, None, "lookup") == TOOLS[0]


def test_tool_choice_forces_a_named_or_any_tool_and_nothing_without_tools() -> None:
    asked = [HumanMessage("write it down")]
    assert planned_call(asked, TOOLS, "note", None) == TOOLS[1]
    assert planned_call(asked, TOOLS, {"function": {"name": "note"}}, None) == TOOLS[1]
    assert planned_call(asked, TOOLS, "any", None) == TOOLS[0]
    assert planned_call(asked, TOOLS, None, None) is None
    assert planned_call(asked, [], "any", "lookup") is None


def test_after_a_tool_result_the_model_is_reminded_of_the_question() -> None:
    call = {"name": "lookup", "args": {"city": "Oslo"}, "id": "c1"}
    history = [
        HumanMessage("Weather in Oslo?"),
        AIMessage("", tool_calls=[call]),
        ToolMessage("sunny", tool_call_id="c1", name="lookup"),
    ]
    assert (
        answer_hint(history) == "Now answer the user's question in one sentence: Weather in Oslo?"
    )
