"""Resumes beyond a single approval, through the official LangGraph Python client (issue
22): several interrupts pending at once are answered by a ``resume`` keyed by interrupt
id (an unkeyed one is refused, naming them), and a question is answered with its text.
What the tool did and what the model received are read at the boundary.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from wire.settings import Settings

from .support.api import api_harness, live_server
from .support.boundary import ModelBoundary
from .support.langgraph import (
    STREAM_MODES,
    collect,
    human,
    last_ai,
    problem,
    run_id_of,
    sdk,
    text_of,
    texts,
)

TWICE = "guarding-twice"
"""Each task: two calls of the approval-gated tool in one message, then "both-decided"."""
QUESTIONING = "questioning"
"""Each task: one question to the caller ("Which colour?", red or blue), then "noted"."""


def _labelled(interrupts: list[dict[str, Any]], label: str) -> str:
    """The id of the approval of the ``guarded_effect`` call with ``label``."""
    # The approval's payload describes the call (its arguments, quoted inside a string).
    wanted = f'"label":"{label}"'
    (ident,) = (i["id"] for i in interrupts if wanted in json.dumps(i["value"]).replace('\\"', '"'))
    return str(ident)


async def test_several_pending_interrupts_are_resumed_by_id(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary, profile=TWICE)) as server:
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            values = await client.runs.wait(tid, TWICE, input=human("two effects"))
            assert isinstance(values, dict)
            state = await client.threads.get_state(tid)
            waiting = await client.threads.search(status="interrupted", ids=[tid])
            with pytest.raises(httpx.HTTPStatusError) as unkeyed:
                await client.runs.wait(tid, TWICE, command={"resume": "approve_once"})
            assert boundary.effect_count() == 0
            pending = values["__interrupt__"]
            approve, decline = _labelled(pending, "first"), _labelled(pending, "second")
            resumed = await collect(
                client.runs.stream(
                    tid,
                    TWICE,
                    command={"resume": {approve: "approve_once", decline: "decline"}},
                    stream_mode=STREAM_MODES,
                )
            )
            after = await client.threads.get_state(tid)

    # Both pending at once, under the same ids in the run's values and in the state.
    assert len(pending) == 2
    assert {i["id"] for i in state["interrupts"]} == {approve, decline}
    assert [t["thread_id"] for t in waiting] == [tid]
    # An unkeyed answer could be either's: refused, naming both.
    assert unkeyed.value.response.status_code in (409, 422)
    refusal = json.dumps(problem(unkeyed.value, unkeyed.value.response.status_code))
    assert approve in refusal
    assert decline in refusal
    # Each answer reached its own call: only the approved one ran, once.
    assert resumed[-1].event == "end"
    assert run_id_of(resumed)
    final = [p.data for p in resumed if p.event == "values"][-1]
    assert text_of(last_ai(final)) == "both-decided"
    assert after["interrupts"] == []
    assert [(e["tool"], e["args"]) for e in boundary.effects()] == [
        ("guarded_effect", {"label": "first"})
    ]


async def test_a_question_is_answered_by_its_text(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary, profile=QUESTIONING)) as server:
        async with sdk(server.url) as client:
            answered: dict[str, Any] = {}
            for answer, resume in (("blue", "blue"), ("red", {"answer": "red"})):
                tid = (await client.threads.create())["thread_id"]
                asked = await client.runs.wait(tid, QUESTIONING, input=human(f"ask {answer}"))
                assert isinstance(asked, dict)
                (interrupt,) = asked["__interrupt__"]
                state = await client.threads.get_state(tid)
                assert [i["id"] for i in state["interrupts"]] == [interrupt["id"]]
                answered[answer] = await client.runs.wait(
                    tid, QUESTIONING, command={"resume": resume}
                )
    assert {a: text_of(last_ai(v)) for a, v in answered.items()} == {
        "blue": "noted",
        "red": "noted",
    }
    # The model's call after each question received the caller's answer.
    calls = boundary.calls()
    assert [texts(call)[-1] for call in calls] == ["ask blue", "blue", "ask red", "red"]
