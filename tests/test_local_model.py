"""The offline model's prompt and tool planning (the model itself needs the ``local`` extra,
which CI does not install; these parts run without it)."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool

from workers.local_model import DEFAULT_SYSTEM, LocalChatModel, chatml
from workers.local_tool_calls import (
    ToolPlan,
    answer_hint,
    call_hint,
    json_object,
    merged_arguments,
    planned_call,
)
from workers.plans import PlannedCall


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


@tool
def note(text: str) -> str:
    """Write a note."""
    return "noted"


@tool
def send(to: str, text: str) -> str:
    """Send a message."""
    return "sent"


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


def _called(name: str, args: dict[str, object], call_id: str) -> list[AIMessage | ToolMessage]:
    return [
        AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}]),
        ToolMessage("done", tool_call_id=call_id, name=name),
    ]


PLAN = (PlannedCall("lookup", {"city": "Oslo"}), PlannedCall("note"))


def test_a_plan_makes_one_call_per_reply_in_order_then_the_model_answers() -> None:
    asked = [HumanMessage("Weather in Oslo?")]
    first = planned_call(asked, TOOLS, None, PLAN)
    assert first == ToolPlan(TOOLS[0], {"city": "Oslo"})
    after_first = [*asked, *_called("lookup", {"city": "Oslo"}, "c1")]
    assert planned_call(after_first, TOOLS, None, PLAN) == ToolPlan(TOOLS[1], {})
    after_both = [*after_first, *_called("note", {"text": "it is sunny"}, "c2")]
    assert planned_call(after_both, TOOLS, None, PLAN) is None
    # The next task of the session starts the plan again.
    again = [*after_both, AIMessage("Sunny."), HumanMessage("And Rome?")]
    assert planned_call(again, TOOLS, None, PLAN) == first


def test_a_planned_call_whose_tool_is_not_offered_is_skipped() -> None:
    asked = [HumanMessage("Weather in Oslo?")]
    only_note = [convert_to_openai_tool(note)]
    assert planned_call(asked, only_note, None, PLAN) == ToolPlan(only_note[0], {})
    assert planned_call(asked, [], None, PLAN) is None


def test_a_pipeline_nudge_is_not_a_new_question() -> None:
    nudge = HumanMessage(
        "You have not completed the following required tasks: note. Please continue.",
        additional_kwargs={"task_steering": {"kind": "nudge"}},
    )
    history = [HumanMessage("Weather in Oslo?"), *_called("lookup", {"city": "Oslo"}, "c1")]
    assert planned_call([*history, nudge], TOOLS, None, PLAN) == ToolPlan(TOOLS[1], {})
    assert answer_hint([*history, nudge]).endswith(": Weather in Oslo?")


def test_fixed_arguments_are_used_as_given_and_the_model_writes_only_the_open_ones() -> None:
    fixed = ToolPlan(TOOLS[0], {"city": "Oslo"})
    assert fixed.open_schema() is None  # nothing left for the model to write
    assert merged_arguments(fixed, '{"city": "Rome"}') == {"city": "Oslo"}
    partly = ToolPlan(convert_to_openai_tool(send), {"to": "ops"})
    schema = partly.open_schema()
    assert schema is not None
    # The model's strings are bounded in the grammar, so its JSON ends before max_tokens.
    assert schema["properties"] == {"text": {"type": "string", "maxLength": 100}}
    assert schema["required"] == ["text"]
    assert merged_arguments(partly, '{"text": "remember"}') == {"to": "ops", "text": "remember"}
    assert merged_arguments(partly, '{"text": "x", "to": "all"}') == {"to": "ops", "text": "x"}
    assert merged_arguments(partly, "not json") == "not json"
    # The grammar lets a raw line break into a string: still the model's object.
    assert merged_arguments(partly, '{"text": "a\nb"} ') == {"to": "ops", "text": "a\nb"}
    assert json_object('{"text": "a') is None
    whole = ToolPlan(TOOLS[1], {}).open_schema()
    assert whole is not None
    assert whole["required"] == ["text"]


def test_a_fully_fixed_call_runs_no_model_and_reports_zero_tokens() -> None:
    """The model is never loaded (CI has no llama_cpp): the call comes from the plan."""
    model = LocalChatModel(plan='[{"tool": "lookup", "args": {"city": "Oslo"}}]')
    reply = model.bind_tools([lookup]).invoke([HumanMessage("Weather in Oslo?")])
    assert isinstance(reply, AIMessage)
    assert [(call["name"], call["args"]) for call in reply.tool_calls] == [
        ("lookup", {"city": "Oslo"})
    ]
    assert reply.usage_metadata == {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}


def test_tool_choice_forces_a_named_or_any_tool_once_per_task() -> None:
    asked = [HumanMessage("write it down")]
    assert planned_call(asked, TOOLS, "note") == ToolPlan(TOOLS[1], {})
    assert planned_call(asked, TOOLS, {"function": {"name": "note"}}) == ToolPlan(TOOLS[1], {})
    assert planned_call(asked, TOOLS, "any") == ToolPlan(TOOLS[0], {})
    assert planned_call(asked, TOOLS, "any", PLAN[1:]) == ToolPlan(TOOLS[1], {})
    assert planned_call(asked, TOOLS, None) is None
    assert planned_call(asked, [], "any", PLAN) is None
    called = [*asked, *_called("note", {"text": "x"}, "c1")]
    assert planned_call(called, TOOLS, "note") is None


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


def test_before_a_planned_call_the_model_is_told_the_tool_and_the_question() -> None:
    history = [
        HumanMessage("Weather in Oslo?"),
        *_called("update_task_status", {"task": "lookup", "status": "in_progress"}, "c1"),
    ]
    hint = call_hint(ToolPlan(TOOLS[1], {}), history)
    assert hint.startswith("The user asked: Weather in Oslo?\nCall the tool note (Write a note.)")
