"""Planned tool calls (``workers/plans.py``) and the scripted model that follows them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import tool

from wire.default_profiles import DEMO_PLAN, PROFILES
from workers.errors import ModelBuildError
from workers.plans import PlannedCall, next_call, parse_plan
from workers.scripted_model import ScriptedChatModel


@tool
def word_count(text: str) -> str:
    """Count the words of a text."""
    return f"{len(text.split())} words"


@tool
def update_task_status(task: str, status: str) -> str:
    """Move a pipeline step."""
    return f"{task} -> {status}"


def test_a_plan_parses_from_json_and_rejects_what_is_not_a_list_of_calls() -> None:
    assert parse_plan('[{"tool": "a", "args": {"x": 1}}, {"tool": "b"}]') == (
        PlannedCall("a", {"x": 1}),
        PlannedCall("b"),
    )
    assert parse_plan(None) == ()
    for bad in ('{"tool": "a"}', "[1]", '[{"args": {}}]', '[{"tool": "a", "x": 1}]', "[", '"a"'):
        with pytest.raises(ModelBuildError):
            parse_plan(bad)


def test_the_position_in_the_plan_is_read_from_the_calls_made_since_the_question() -> None:
    plan = parse_plan(DEMO_PLAN)
    offered = {"update_task_status", "word_count", "save_note"}
    messages: list[BaseMessage] = [HumanMessage("How long is this?")]
    seen = []
    for index in range(len(plan)):
        entry = next_call(plan, messages, offered)
        assert entry is not None
        seen.append(entry)
        args = dict(entry.args) or {"text": "How long is this?"}
        call_id = f"c{index}"
        messages += [
            AIMessage("", tool_calls=[{"name": entry.tool, "args": args, "id": call_id}]),
            ToolMessage("ok", tool_call_id=call_id, name=entry.tool),
        ]
    assert seen == list(plan)
    assert next_call(plan, messages, offered) is None


def test_a_call_that_differs_from_the_plan_does_not_advance_it() -> None:
    plan = (PlannedCall("s", {"task": "count"}), PlannedCall("w"))
    other = [
        HumanMessage("q"),
        AIMessage("", tool_calls=[{"name": "s", "args": {"task": "note"}, "id": "c"}]),
        ToolMessage("refused", tool_call_id="c", name="s"),
    ]
    assert next_call(plan, other, {"s", "w"}) == plan[0]


def _reply(model: Runnable[Any, Any], messages: list[BaseMessage]) -> AIMessage:
    reply = model.invoke(messages)
    assert isinstance(reply, AIMessage)
    return reply


def test_the_scripted_model_follows_its_plan_and_then_quotes_the_session_and_tools() -> None:
    model = ScriptedChatModel(plan=DEMO_PLAN).bind_tools([word_count, update_task_status])
    messages: list[BaseMessage] = [
        HumanMessage("What is the capital of France?"),
        AIMessage("[scripted model] ..."),
        HumanMessage("And what did I ask you before?"),
    ]
    first = _reply(model, messages)
    assert [(c["name"], c["args"]) for c in first.tool_calls] == [
        ("update_task_status", {"task": "count", "status": "in_progress"})
    ]
    # The pipeline's status tool answers without a tool name.
    messages += [first, ToolMessage("ok", tool_call_id=first.tool_calls[0]["id"])]
    second = _reply(model, messages)
    # The argument the plan leaves open gets the latest question.
    assert [(c["name"], c["args"]) for c in second.tool_calls] == [
        ("word_count", {"text": "And what did I ask you before?"})
    ]
    call_id = second.tool_calls[0]["id"]
    messages += [second, ToolMessage("6 words", tool_call_id=call_id, name="word_count")]
    # save_note is not offered here: the rest of the plan is status calls, then the answer.
    statuses = []
    while (reply := _reply(model, messages)).tool_calls:
        statuses.append(reply.tool_calls[0]["args"])
        messages += [reply, ToolMessage("ok", tool_call_id=reply.tool_calls[0]["id"])]
    assert statuses == [
        {"task": "count", "status": "complete"},
        {"task": "note", "status": "in_progress"},
        {"task": "note", "status": "complete"},
    ]
    assert reply.text == (
        "[scripted model] You asked 'And what did I ask you before?'. Before that you asked "
        "'What is the capital of France?' (1 earlier question in this session). "
        "The word_count tool says: 6 words."
    )


def test_the_demo_profiles_share_the_agent_and_scripted_stays_model_only() -> None:
    scripted, agent, local = (
        PROFILES["scripted"],
        PROFILES["scripted-agent"],
        PROFILES["local-agent"],
    )
    assert scripted.tools == ()
    assert scripted.pipeline is None
    assert not scripted.model.options
    assert agent.tools == local.tools
    assert agent.pipeline == local.pipeline
    assert agent.model.options["plan"] == local.model.options["plan"] == DEMO_PLAN
    gated = [spec.name for spec in agent.tools if spec.approval.value == "required"]
    assert gated == ["save_note"]
    named = {entry["tool"] for entry in json.loads(DEMO_PLAN)}
    assert named - {"update_task_status"} == {spec.name for spec in agent.tools}
