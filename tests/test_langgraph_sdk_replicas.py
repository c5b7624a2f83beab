"""The official LangGraph Python client against two ``ahp-celery api`` processes of one
deployment, as replicas behind a load balancer run (issue 22): a thread interrupted
through one is seen and resumed through the other, and of two resumes of one interrupt
sent at once, one to each replica, one wins and the other gets a 409 — the race
LangGraph servers lose across replicas (aegra#253). The effect is counted at the tool,
in the worker; the API processes carry no boundary scope, so the boundary sees the
unscoped calls made since it was opened.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from wire.settings import Settings

from .support.api import api_process
from .support.boundary import ModelBoundary
from .support.langgraph import (
    STREAM_MODES,
    assert_unique_ids,
    collect,
    human,
    last_ai,
    model_inputs,
    sdk,
    status_of,
    text_of,
)

GUARDING = "guarding"
"""Each task calls the approval-gated ``guarded_effect`` once, then answers
"guarded-result"."""


@pytest.mark.processes
async def test_an_interrupt_taken_on_one_replica_is_resumed_once_across_both(
    settings: Settings, boundary: ModelBoundary, tmp_path: Path
) -> None:
    replica = {"AHP_PROFILE": GUARDING}
    async with (
        api_process(settings, tmp_path / "a.log", replica) as first,
        api_process(settings, tmp_path / "b.log", replica) as second,
        sdk(first.url) as a,
        sdk(second.url) as b,
    ):
        tid = (await a.threads.create())["thread_id"]
        parts = await collect(
            a.runs.stream(tid, GUARDING, input=human("across replicas"), stream_mode=STREAM_MODES)
        )
        state = await b.threads.get_state(tid)
        outcomes: list[Any] = list(
            await asyncio.gather(
                a.runs.wait(tid, GUARDING, command={"resume": "approve_once"}),
                b.runs.wait(tid, GUARDING, command={"resume": "approve_once"}),
                return_exceptions=True,
            )
        )
        after = await a.threads.get_state(tid)
        runs = await b.runs.list(tid)

    # The interrupt, streamed through one replica, is in the thread's state on the other.
    assert parts[-1].event == "end"
    assert_unique_ids(parts)
    final = [p.data for p in parts if p.event == "values"][-1]
    (interrupt,) = state["interrupts"]
    assert [i["id"] for i in final["__interrupt__"]] == [interrupt["id"]]
    # One resume won; the other, on the other replica, was refused with a 409.
    answers = [o for o in outcomes if isinstance(o, dict)]
    refusals = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(answers) == 1, outcomes
    assert len(refusals) == 1, outcomes
    assert status_of(refusals[0]) == 409
    assert text_of(last_ai(answers[0])) == "guarded-result"
    assert after["interrupts"] == []
    assert {run["status"] for run in runs} == {"success"}
    # At the worker: one task (its model calls before and after the tool), the effect once.
    calls = boundary.calls()
    assert model_inputs(calls)[0] == "across replicas"
    assert len({call["task"] for call in calls}) == 1
    effects = boundary.effects()
    assert [(e["tool"], e["args"], e["task"]) for e in effects] == [
        ("guarded_effect", {"label": "guarded"}, calls[0]["task"])
    ]
