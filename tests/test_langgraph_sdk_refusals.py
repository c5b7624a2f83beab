"""What the LangGraph dialect refuses or orders, through the official Python client
(issue 22): ``multitask_strategy`` reject / enqueue / interrupt on a busy thread, other
tenants' threads and runs (404), requests without a valid key (401), and bodies it
cannot honour (422 problems naming the field). Whether anything ran is observed at the
model boundary.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import (
    AuthenticationError,
    ConflictError,
    NotFoundError,
    UnprocessableEntityError,
)

from wire.settings import Settings

from .support.api import TOKENS, api_harness, live_server, problem_of
from .support.boundary import ModelBoundary
from .support.langgraph import (
    collect,
    held,
    human,
    last_ai,
    model_inputs,
    problem,
    sdk,
    status_of,
    text_of,
    texts,
    until_status,
)
from .support.waiting import until


async def test_reject_refuses_a_run_while_the_thread_is_busy(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server, held(boundary):
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            running = await client.runs.create(tid, "confirmed", input=human("first"))
            await until(lambda: boundary.in_flight() == 1, "the first run's model call")
            assert (await client.threads.get(tid))["status"] == "busy"
            with pytest.raises(ConflictError) as created:
                await client.runs.create(
                    tid, "confirmed", input=human("refused"), multitask_strategy="reject"
                )
            problem(created.value, 409)
            with pytest.raises(ConflictError):
                await collect(
                    client.runs.stream(
                        tid, "confirmed", input=human("refused"), multitask_strategy="reject"
                    )
                )
            with pytest.raises(httpx.HTTPStatusError) as waited:
                await client.runs.wait(
                    tid, "confirmed", input=human("refused"), multitask_strategy="reject"
                )
            assert status_of(waited.value) == 409
            boundary.release()
            first = await client.runs.join(tid, running["run_id"])
            # Once the thread is idle, reject lets a run in.
            after = await client.runs.wait(
                tid, "confirmed", input=human("after"), multitask_strategy="reject"
            )
    assert text_of(last_ai(first)) == "native-result"
    assert isinstance(after, dict)
    assert model_inputs(boundary.calls()) == ["first", "after"]


async def test_enqueue_runs_after_the_busy_run_in_order(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server, held(boundary):
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            first = await client.runs.create(tid, "confirmed", input=human("first"))
            await until(lambda: boundary.in_flight() == 1, "the first run's model call")
            second = await client.runs.create(
                tid, "confirmed", input=human("second"), multitask_strategy="enqueue"
            )
            # No strategy: LangGraph's default, enqueue.
            third = await client.runs.create(tid, "confirmed", input=human("third"))
            queued = [(await client.runs.get(tid, r["run_id"]))["status"] for r in (second, third)]
            assert model_inputs(boundary.calls()) == ["first"]
            boundary.release()
            results = [await client.runs.join(tid, r["run_id"]) for r in (first, second, third)]
            statuses = [
                (await client.runs.get(tid, r["run_id"]))["status"] for r in (first, second, third)
            ]
    assert queued == ["pending", "pending"]
    assert statuses == ["success"] * 3
    assert [len(r["messages"]) for r in results] == [2, 4, 6]
    # At the model: one call at a time, in the order the runs were made, each on the
    # conversation so far.
    calls = boundary.calls()
    assert model_inputs(calls) == ["first", "second", "third"]
    assert boundary.overlaps == 0
    assert {"first", "second"} <= set(texts(calls[2]))


async def test_interrupt_cancels_the_busy_run_then_runs(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server, held(boundary):
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            first = await client.runs.create(tid, "confirmed", input=human("first"))
            await until(lambda: boundary.in_flight() == 1, "the first run's model call")
            first_task = str(boundary.calls()[0]["task"])
            second = await client.runs.create(
                tid, "confirmed", input=human("instead"), multitask_strategy="interrupt"
            )
            await until(lambda: boundary.was_cancelled(first_task), "the first call's cancel")
            await until_status(client, tid, first["run_id"], "interrupted")
            boundary.release()
            result = await client.runs.join(tid, second["run_id"])
    assert text_of(last_ai(result)) == "native-result"
    assert model_inputs(boundary.calls()) == ["first", "instead"]
    assert boundary.overlaps == 0


async def test_another_tenants_threads_and_runs_are_unknown(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:
        async with sdk(server.url) as alpha, sdk(server.url, "beta") as beta:
            tid = (await alpha.threads.create(metadata={"owner": "alpha"}))["thread_id"]
            rid = (await alpha.runs.create(tid, "confirmed", input=human("alpha's")))["run_id"]
            await alpha.runs.join(tid, rid)
            refusals: dict[str, BaseException] = {}
            attempts: dict[str, Any] = {
                "threads.get": lambda: beta.threads.get(tid),
                "threads.get_state": lambda: beta.threads.get_state(tid),
                "threads.delete": lambda: beta.threads.delete(tid),
                "runs.get": lambda: beta.runs.get(tid, rid),
                "runs.list": lambda: beta.runs.list(tid),
                "runs.join": lambda: beta.runs.join(tid, rid),
                "runs.cancel": lambda: beta.runs.cancel(tid, rid),
                "runs.create": lambda: beta.runs.create(tid, "confirmed", input=human("beta")),
                "runs.wait": lambda: beta.runs.wait(tid, "confirmed", input=human("beta")),
                "runs.stream": lambda: collect(
                    beta.runs.stream(tid, "confirmed", input=human("beta"))
                ),
                "runs.join_stream": lambda: collect(
                    beta.runs.join_stream(tid, rid, last_event_id="-1")
                ),
            }
            for name, attempt in attempts.items():
                try:
                    await attempt()
                except httpx.HTTPStatusError as error:
                    refusals[name] = error
            found = await beta.threads.search(metadata={"owner": "alpha"})
            still = await alpha.threads.get(tid)
    assert {name: status_of(error) for name, error in refusals.items()} == dict.fromkeys(
        attempts, 404
    )
    assert isinstance(refusals["threads.get"], NotFoundError)
    problem(refusals["runs.get"], 404)
    assert found == []
    assert still["metadata"] == {"owner": "alpha"}
    assert model_inputs(boundary.calls()) == ["alpha's"]


async def test_a_request_without_a_valid_key_is_unauthenticated(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:
        async with get_client(url=server.url, api_key=None) as anonymous:
            with pytest.raises(AuthenticationError) as missing:
                await anonymous.threads.search()
        async with get_client(url=server.url, api_key="not-a-token-of-anyone") as wrong:
            with pytest.raises(AuthenticationError):
                await wrong.threads.create()
        # The tenant's token as a bearer token works as well as x-api-key.
        bearer = {"Authorization": f"Bearer {TOKENS['alpha']}"}
        async with get_client(url=server.url, api_key=None, headers=bearer) as client:
            assert (await client.threads.create())["thread_id"]
    problem(missing.value, 401)
    assert boundary.calls() == []


REFUSED_RUNS: dict[str, tuple[dict[str, Any], str]] = {
    "stream_mode events": ({"stream_mode": "events"}, "stream_mode"),
    "stream_mode messages": ({"stream_mode": ["values", "messages"]}, "stream_mode"),
    "input not messages": ({"input": {"question": "x"}}, "input"),
    "messages not a list": ({"input": {"messages": "x"}}, "input"),
    "input with command": ({"command": {"resume": "approve_once"}}, "command"),
    "goto": ({"input": None, "command": {"goto": "agent"}}, "command"),
    "rollback": ({"multitask_strategy": "rollback"}, "multitask_strategy"),
    "checkpoint_id": ({"checkpoint_id": "c-1"}, "checkpoint_id"),
    "webhook": ({"webhook": "https://example.invalid/hook"}, "webhook"),
    "interrupt_before": ({"interrupt_before": ["agent"]}, "interrupt_before"),
    "after_seconds": ({"after_seconds": 5}, "after_seconds"),
    "stream_subgraphs": ({"stream_subgraphs": True}, "stream_subgraphs"),
    "config": ({"config": {"configurable": {"x": 1}}}, "config"),
    "context": ({"context": {"user": "ada"}}, "context"),
    "checkpoint": ({"checkpoint": {"checkpoint_id": "c-1"}}, "checkpoint"),
    "interrupt_after": ({"interrupt_after": ["agent"]}, "interrupt_after"),
    "feedback_keys": ({"feedback_keys": ["score"]}, "feedback_keys"),
    "durability": ({"durability": "sync"}, "durability"),
    "langsmith_tracer": ({"langsmith_tracing": {"project_name": "p"}}, "langsmith_tracer"),
}


async def test_bodies_the_dialect_cannot_honour_are_422_problems_naming_the_field(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            refused: dict[str, BaseException | None] = {}
            for name, (fields, _) in REFUSED_RUNS.items():
                arguments: dict[str, Any] = {"input": human("refused"), **fields}
                try:
                    # A body accepted by mistake runs to its end (nothing holds the model).
                    async with asyncio.timeout(30):
                        await collect(client.runs.stream(tid, "confirmed", **arguments))
                    refused[name] = None
                except UnprocessableEntityError as error:
                    refused[name] = error
            with pytest.raises(UnprocessableEntityError) as ttl:
                await client.threads.create(ttl=60)
            # A body that is not the SDK's at all.
            async with httpx.AsyncClient(base_url=server.url) as raw:
                malformed = await raw.post(
                    f"/threads/{tid}/runs",
                    json={"assistant_id": 5, "input": []},
                    headers={"x-api-key": TOKENS["alpha"]},
                )
                # A field no SDK sends is not silently ignored either.
                unknown = await raw.post(
                    f"/threads/{tid}/runs",
                    json={"assistant_id": "confirmed", "input": human("x"), "temperature": 1},
                    headers={"x-api-key": TOKENS["alpha"]},
                )
            # A rollback cancel of a running run is refused, and the run goes on.
            with held(boundary):
                running = await client.runs.create(tid, "confirmed", input=human("kept"))
                await until(lambda: boundary.in_flight() == 1, "the kept run's model call")
                with pytest.raises(UnprocessableEntityError) as rollback:
                    await client.runs.cancel(tid, running["run_id"], action="rollback")
                (kept_task,) = (c["task"] for c in boundary.calls() if texts(c)[-1] == "kept")
            kept = await client.runs.join(tid, running["run_id"])
            thread = await client.threads.get(tid)

    accepted = [name for name, error in refused.items() if error is None]
    assert accepted == [], (accepted, model_inputs(boundary.calls()))
    for name, (_, field) in REFUSED_RUNS.items():
        body = problem(refused[name], 422)  # type: ignore[arg-type]
        assert field in json.dumps(body), (name, body)
    assert "ttl" in json.dumps(problem(ttl.value, 422))
    assert malformed.status_code == 422
    assert malformed.headers["content-type"].startswith("application/problem+json")
    assert unknown.status_code == 422, unknown.text
    assert "temperature" in json.dumps(problem_of(unknown))
    assert "action" in json.dumps(problem(rollback.value, 422))
    assert text_of(last_ai(kept)) == "native-result"
    assert not boundary.was_cancelled(str(kept_task))
    assert thread["status"] == "idle"
    # Nothing refused reached the model.
    assert model_inputs(boundary.calls()) == ["kept"]
