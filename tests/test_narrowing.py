"""A session or a task narrows its profile (fewer tools, a smaller token budget), never
widens it: widening is an admission issue; the narrowing is what the model is offered (as
the controlled model records it) and what the safeguards enforce in the worker."""

from __future__ import annotations

import asyncio

import pytest
import redis
from agent_harness_protocol import (
    CompatibilityStatus,
    Completed,
    Failed,
    FailureKind,
    IncompatibleRequirementError,
    SessionSpec,
    TaskRequest,
    TextInput,
)

from wire.narrowing import NarrowedSessionSpec, NarrowedTaskRequest, Narrowing
from wire.settings import Settings

from .support.api import api_harness, auth, in_process, keyspace, problem_of
from .support.boundary import ModelBoundary
from .support.fixtures import scoped_harness


def _issues(report: object) -> list[str]:
    return [issue.path for issue in report.issues]  # type: ignore[attr-defined]


async def test_widening_a_profile_is_an_admission_issue_and_narrowing_is_admitted(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with scoped_harness(settings, boundary, "budgeted") as harness:
        fine = harness.validate(NarrowedSessionSpec(narrowing=Narrowing(("record_effect",), 20)))
        assert fine.status is CompatibilityStatus.COMPATIBLE
        unknown = harness.validate(NarrowedSessionSpec(narrowing=Narrowing(("rm_rf",))))
        assert _issues(unknown) == ["narrowing.tools"]
        wider = harness.validate(NarrowedSessionSpec(narrowing=Narrowing(token_budget=26)))
        assert _issues(wider) == ["narrowing.token_budget"]
        with pytest.raises(IncompatibleRequirementError):
            await harness.create_session(NarrowedSessionSpec(narrowing=Narrowing(("rm_rf",))))
        session = await harness.create_session(
            NarrowedSessionSpec(narrowing=Narrowing(("record_effect",), 20))
        )
        # A task narrows its session further, never back to the profile.
        task_wider = session.validate(
            NarrowedTaskRequest(TextInput("x"), narrowing=Narrowing(("failing_tool",), 21))
        )
        assert _issues(task_wider) == ["narrowing.tools", "narrowing.token_budget"]
    async with scoped_harness(settings, boundary, "confirmed") as model_only:
        budget = model_only.validate(NarrowedSessionSpec(narrowing=Narrowing(token_budget=5)))
        assert _issues(budget) == ["narrowing.token_budget"]


async def test_a_narrowed_session_offers_only_its_tools_and_refuses_the_others(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with scoped_harness(settings, boundary, "agent") as harness:
        session = await harness.create_session(
            NarrowedSessionSpec(narrowing=Narrowing(("failing_tool",)))
        )
        task = await session.start_task(TaskRequest(TextInput("narrowed tools")))
        boundary.script(
            task.id.value, {"op": "tool_call", "name": "record_effect", "args": {"label": "no"}}
        )
        boundary.script(task.id.value, {"op": "complete", "text": "could not"})
        outcome = await asyncio.wait_for(task.await_outcome(), 60)

    assert isinstance(outcome, Completed)
    calls = boundary.calls_for(task.id.value)
    assert [call["tools"] for call in calls] == [["failing_tool"], ["failing_tool"]]
    assert boundary.effects_for(task.id.value) == []
    assert any("not offered" in text for text in calls[1]["texts"])  # type: ignore[attr-defined]


async def test_a_narrowed_budget_is_enforced_for_the_session_and_tighter_for_a_task(
    settings: Settings, boundary: ModelBoundary
) -> None:
    """The ``budgeted`` profile allows 25 tokens per task; each call uses 10."""
    async with scoped_harness(settings, boundary, "budgeted") as harness:
        session = await harness.create_session(
            NarrowedSessionSpec(narrowing=Narrowing(token_budget=15))
        )
        first = await session.start_task(TaskRequest(TextInput("session budget")))
        for label in ("a", "b"):
            boundary.script(
                first.id.value,
                {"op": "tool_call", "name": "record_effect", "args": {"label": label}},
            )
        first_outcome = await asyncio.wait_for(first.await_outcome(), 60)
        second = await session.start_task(
            NarrowedTaskRequest(TextInput("task budget"), narrowing=Narrowing(token_budget=5))
        )
        boundary.script(
            second.id.value,
            {"op": "tool_call", "name": "record_effect", "args": {"label": "c"}},
        )
        second_outcome = await asyncio.wait_for(second.await_outcome(), 60)

    assert isinstance(first_outcome, Failed)
    assert first_outcome.kind is FailureKind.BUDGET_EXCEEDED
    assert [e["args"]["label"] for e in boundary.effects_for(first.id.value)] == ["a"]
    assert isinstance(second_outcome, Failed)
    assert second_outcome.kind is FailureKind.BUDGET_EXCEEDED
    assert boundary.effects_for(second.id.value) == []
    assert SessionSpec() == SessionSpec()  # plain specs are untouched by the extension


async def test_the_http_api_refuses_widening_with_a_listed_422_and_admits_narrowing(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with in_process(api_harness(settings, boundary, "agent")) as client:
        before = keyspace(sync_redis)
        refused = await client.post("/v1/sessions", json={"tools": ["rm_rf"]}, headers=auth())
        assert refused.status_code == 422
        body = problem_of(refused)
        assert body["type"].endswith("/incompatible-requirements")
        assert [issue["path"] for issue in body["issues"]] == ["narrowing.tools"]
        assert keyspace(sync_redis) == before
        created = await client.post(
            "/v1/sessions", json={"tools": ["failing_tool"]}, headers=auth()
        )
        assert created.status_code == 201, created.text
        session_id = created.json()["id"]
        wider = await client.post(
            f"/v1/sessions/{session_id}/tasks",
            json={"input": "x", "tools": ["record_effect"]},
            headers=auth(),
        )
        assert wider.status_code == 422
        assert [issue["path"] for issue in problem_of(wider)["issues"]] == ["narrowing.tools"]
