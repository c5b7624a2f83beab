"""Approval interrupts through the official LangGraph Python client (issue 22): the
interrupt shows in the stream and in ``threads.get_state`` with a stable id, a
``Command(resume=...)`` on a new run answers it, and of two concurrent resumes one wins,
the other gets a 409. The effect is counted where it happens: at the tool, in the worker.

"guarding": each task calls the approval-gated ``guarded_effect`` once, then answers
"guarded-result".
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import ConflictError

from wire.settings import Settings

from .support.api import api_harness, auth, live_server
from .support.boundary import ModelBoundary
from .support.langgraph import (
    STREAM_MODES,
    collect,
    human,
    last_ai,
    problem,
    run_id_of,
    sdk,
    status_of,
    text_of,
    texts,
)

GUARDING = "guarding"


async def _interrupted(client: LangGraphClient, text: str) -> tuple[str, str]:
    """A thread whose run ended at its approval: (thread id, interrupt id)."""
    tid = (await client.threads.create())["thread_id"]
    values = await client.runs.wait(tid, GUARDING, input=human(text))
    assert isinstance(values, dict), values
    (interrupt,) = values["__interrupt__"]
    return tid, str(interrupt["id"])


async def test_an_approval_interrupt_is_seen_in_the_state_and_resumed_by_a_command(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary, profile=GUARDING)) as server:
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            parts = await collect(
                client.runs.stream(tid, GUARDING, input=human("guarded"), stream_mode=STREAM_MODES)
            )
            first_run = run_id_of(parts)
            # The run's segment ended at the approval; the tool has not run.
            assert parts[-1].event == "end"
            assert parts[-1].data["status"] == "success"
            assert boundary.effect_count() == 0
            state = await client.threads.get_state(tid)
            thread = await client.threads.get(tid)
            ended = await client.runs.get(tid, first_run)
            task_id = str(boundary.calls()[0]["task"])
            async with httpx.AsyncClient(base_url=server.url) as v1:
                task = (await v1.get(f"/v1/tasks/{task_id}", headers=auth())).json()

            resumed = await collect(
                client.runs.stream(
                    tid, GUARDING, command={"resume": "approve_once"}, stream_mode=STREAM_MODES
                )
            )
            after = await client.threads.get_state(tid)
            with pytest.raises(ConflictError) as nothing_pending:
                await client.runs.create(tid, GUARDING, command={"resume": "approve_once"})
            problem(nothing_pending.value, 409)

    (interrupt,) = state["interrupts"]
    assert set(interrupt) >= {"value", "id"}
    # One id for the interrupt everywhere: the stream, the state, the AHP interaction.
    final = [p.data for p in parts if p.event == "values"][-1]
    assert [i["id"] for i in final["__interrupt__"]] == [interrupt["id"]]
    updates = [p.data["__interrupt__"] for p in parts if p.event == "updates"]
    assert [i["id"] for i in updates[-1]] == [interrupt["id"]]
    (pending,) = task["pending_interactions"]
    assert pending["interaction_id"] == interrupt["id"]
    assert thread["status"] == "interrupted"
    assert ended["status"] == "success"

    # The resume is a new run of the same task; it ran the tool once and answered.
    assert run_id_of(resumed) != first_run
    assert resumed[-1].event == "end"
    assert resumed[-1].data["status"] == "success"
    values = [p.data for p in resumed if p.event == "values"][-1]
    assert text_of(last_ai(values)) == "guarded-result"
    assert "tool" in [m["type"] for m in values["messages"]]
    assert after["interrupts"] == []
    effects = boundary.effects()
    assert [(e["tool"], e["args"], e["task"]) for e in effects] == [
        ("guarded_effect", {"label": "guarded"}, task_id)
    ]
    assert {call["task"] for call in boundary.calls()} == {task_id}


async def test_resumes_keyed_by_interrupt_id_or_given_as_a_decision_object(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary, profile=GUARDING)) as server:
        async with sdk(server.url) as client:
            declined_tid, declined_id = await _interrupted(client, "decline it")
            declined = await client.runs.wait(
                declined_tid, GUARDING, command={"resume": {declined_id: "decline"}}
            )
            assert boundary.effect_count() == 0
            approved_tid, _ = await _interrupted(client, "approve it")
            approved = await client.runs.wait(
                approved_tid, GUARDING, command={"resume": {"decision": "approve_once"}}
            )
            states = [await client.threads.get_state(t) for t in (declined_tid, approved_tid)]
    assert isinstance(declined, dict)
    assert isinstance(approved, dict)
    assert text_of(last_ai(declined)) == "guarded-result"
    assert text_of(last_ai(approved)) == "guarded-result"
    assert [s["interrupts"] for s in states] == [[], []]
    # Only the approved call ran its effect, in the approved thread's task.
    tasks = {texts(call)[-1]: call["task"] for call in boundary.calls()}
    effects = boundary.effects()
    assert [e["task"] for e in effects] == [tasks["approve it"]]


async def test_of_two_concurrent_resumes_one_wins_and_the_other_gets_a_409(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary, profile=GUARDING)) as server:
        async with sdk(server.url) as client, sdk(server.url) as other:
            waited: list[list[Any]] = []
            for round_ in range(3):
                tid, _ = await _interrupted(client, f"race {round_}")
                # Two clients, two connections, the same interrupt.
                waited.append(
                    list(
                        await asyncio.gather(
                            client.runs.wait(tid, GUARDING, command={"resume": "approve_once"}),
                            other.runs.wait(tid, GUARDING, command={"resume": "approve_once"}),
                            return_exceptions=True,
                        )
                    )
                )
            # The same race through runs.create and runs.stream (typed errors).
            tid, _ = await _interrupted(client, "race create")
            created, streamed = await asyncio.gather(
                client.runs.create(tid, GUARDING, command={"resume": "approve_once"}),
                collect(other.runs.stream(tid, GUARDING, command={"resume": "approve_once"})),
                return_exceptions=True,
            )
            for outcome in (created, streamed):
                if isinstance(outcome, dict):
                    await client.runs.join(tid, outcome["run_id"])
            final = await client.threads.get_state(tid)

    for outcomes in waited:
        answers = [o for o in outcomes if isinstance(o, dict)]
        refusals = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(answers) == 1, outcomes
        assert len(refusals) == 1, outcomes
        assert text_of(last_ai(answers[0])) == "guarded-result"
        assert status_of(refusals[0]) == 409
    race = [created, streamed]
    losers = [o for o in race if isinstance(o, BaseException)]
    assert len(losers) == 1, race
    assert isinstance(losers[0], ConflictError)
    problem(losers[0], 409)
    assert final["interrupts"] == []
    # Each interrupt's effect happened exactly once, at the tool.
    tasks = {texts(call)[-1]: call["task"] for call in boundary.calls()}
    effects = [str(e["task"]) for e in boundary.effects()]
    assert sorted(effects) == sorted(
        str(tasks[text]) for text in ("race 0", "race 1", "race 2", "race create")
    )
