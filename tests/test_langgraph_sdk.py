"""The official LangGraph Python client (``langgraph-sdk`` 0.4.14) against the API's
LangGraph dialect over a real socket (issue 22): assistants, threads, streamed, waited
and stateless runs. What ran is observed at the model boundary (where the model runs in
the worker), never read back from the API alone.

Contract: the router in ``harness.api.langgraph``; how the clients behave:
``tests.support.langgraph``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import ConflictError, NotFoundError

from wire.settings import Settings

from .support.api import TOKENS, api_harness, live_server
from .support.boundary import ModelBoundary
from .support.langgraph import (
    STREAM_MODES,
    assert_unique_ids,
    collect,
    human,
    last_ai,
    model_inputs,
    problem,
    run_id_of,
    sdk,
    text_of,
    texts,
)


async def test_the_assistant_is_the_deployment_profile(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:
        async with sdk(server.url) as client:
            found = await client.assistants.search()
            assert [a["assistant_id"] for a in found] == ["confirmed"]
            assistant = await client.assistants.get("confirmed")
            assert assistant["graph_id"] == "confirmed"
            graph = await client.assistants.get_graph("confirmed")
            nodes = {node["id"] for node in graph["nodes"]}
            assert {"__start__", "agent", "__end__"} <= nodes
            with pytest.raises(NotFoundError) as unknown:
                await client.assistants.get("no-such-assistant")
            problem(unknown.value, 404)
            # A run of another assistant is refused before anything runs.
            thread = await client.threads.create()
            with pytest.raises(NotFoundError):
                await client.runs.create(thread["thread_id"], "no-such", input=human("x"))
    assert boundary.calls() == []


async def test_threads_keep_their_metadata_and_are_found_by_it(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:
        async with sdk(server.url) as client:
            tagged = await client.threads.create(metadata={"purpose": "sdk-test", "n": 1})
            other = await client.threads.create(metadata={"purpose": "other"})
            tid = tagged["thread_id"]
            assert tagged["metadata"] == {"purpose": "sdk-test", "n": 1}
            assert tagged["status"] == "idle"
            assert (await client.threads.get(tid))["metadata"] == tagged["metadata"]

            found = await client.threads.search(metadata={"purpose": "sdk-test"})
            assert [t["thread_id"] for t in found] == [tid]
            by_id = await client.threads.search(ids=[other["thread_id"]])
            assert [t["thread_id"] for t in by_id] == [other["thread_id"]]

            # A thread id given by the caller; a duplicate raises or returns the existing one.
            named = await client.threads.create(thread_id=f"{tid}-named", metadata={"a": 1})
            assert named["thread_id"] == f"{tid}-named"
            with pytest.raises(ConflictError) as duplicate:
                await client.threads.create(thread_id=named["thread_id"])
            problem(duplicate.value, 409)
            again = await client.threads.create(
                thread_id=named["thread_id"], if_exists="do_nothing", metadata={"b": 2}
            )
            assert (again["thread_id"], again["metadata"]) == (named["thread_id"], {"a": 1})

            await client.threads.delete(tid)
            with pytest.raises(NotFoundError):
                await client.threads.get(tid)
            assert await client.threads.search(metadata={"purpose": "sdk-test"}) == []
    assert boundary.calls() == []


async def test_a_streamed_run_sends_metadata_tokens_values_and_end_with_unique_ids(
    settings: Settings, boundary: ModelBoundary
) -> None:
    # "slow": twenty chunks, then the reply, each streamed as the model produces it.
    with live_server(api_harness(settings, boundary, profile="slow")) as server:
        async with sdk(server.url) as client:
            thread = await client.threads.create()
            tid = thread["thread_id"]
            created: list[Any] = []
            parts = await collect(
                client.runs.stream(
                    tid,
                    "slow",
                    input=human("stream me"),
                    stream_mode=STREAM_MODES,
                    on_run_created=created.append,
                )
            )
            run_id = run_id_of(parts)
            run = await client.runs.get(tid, run_id)
            state = await client.threads.get_state(tid)

    # The run the stream names is the one Content-Location announced.
    assert [(c["run_id"], c["thread_id"]) for c in created] == [(run_id, tid)]
    assert parts[0].data["thread_id"] == tid
    assert parts[-1].event == "end"
    assert parts[-1].data["run_id"] == run_id
    assert parts[-1].data["status"] == "success"
    assert run["status"] == "success"
    # Every event has an id of its own.
    assert_unique_ids(parts)
    assert {part.event for part in parts} <= {"metadata", "values", "messages", "updates", "end"}

    # The tokens: `messages` events, [chunk, metadata], one stable id per message.
    tokens = [part.data for part in parts if part.event == "messages"]
    assert len(tokens) >= 21
    chunk_ids = {chunk["id"] for chunk, _ in tokens}
    assert len(chunk_ids) == 1, chunk_ids
    assert None not in chunk_ids
    assert all(chunk["type"] == "AIMessageChunk" for chunk, _ in tokens)
    assert all(isinstance(meta, dict) for _, meta in tokens)
    streamed = "".join(text_of(chunk) for chunk, _ in tokens)
    assert streamed == "".join(f"chunk{i} " for i in range(20)) + "native-result"

    # The final values hold the human input and the AI answer, under the chunks' id.
    values = [part.data for part in parts if part.event == "values"]
    final = values[-1]
    assert [m["type"] for m in final["messages"]] == ["human", "ai"]
    assert text_of(final["messages"][0]) == "stream me"
    assert text_of(last_ai(final)) == streamed
    assert last_ai(final)["id"] in chunk_ids
    agent_updates = [p.data["agent"] for p in parts if p.event == "updates" and "agent" in p.data]
    assert text_of(agent_updates[-1]["messages"][-1]) == streamed

    # The thread's state is the run's final values.
    def brief(messages: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return [(m["type"], m["id"], text_of(m)) for m in messages]

    state_values = state["values"]
    assert isinstance(state_values, dict)
    assert brief(state_values["messages"]) == brief(final["messages"])
    assert state["checkpoint"] is not None
    assert state["interrupts"] == []

    # The model ran once, on that input, and streamed what the client saw.
    calls = boundary.calls()
    assert model_inputs(calls) == ["stream me"]


async def test_a_thread_is_one_conversation_and_wait_returns_its_values(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            created: list[Any] = []
            first = await client.runs.wait(
                tid,
                "confirmed",
                input=human("first turn"),
                metadata={"turn": 1},
                on_run_created=created.append,
            )
            # A message given with LangChain's `type` rather than `role`.
            typed_human: Any = {"messages": [{"type": "human", "content": "second"}]}
            second = await client.runs.wait(tid, "confirmed", input=typed_human)
            runs = await client.runs.list(tid)
            first_run = await client.runs.get(tid, created[0]["run_id"])
            thread = await client.threads.get(tid)
    assert isinstance(first, dict)
    assert isinstance(second, dict)
    assert text_of(last_ai(first)) == "native-result"
    assert [m["type"] for m in second["messages"]] == ["human", "ai", "human", "ai"]
    assert {run["status"] for run in runs} == {"success"}
    assert len(runs) == 2
    assert thread["status"] == "idle"
    assert first_run["metadata"] == {"turn": 1}
    # At the model: two calls, the second on the first turn's context.
    calls = boundary.calls()
    assert model_inputs(calls) == ["first turn", "second"]
    assert "first turn" in texts(calls[1])
    assert len({call["task"] for call in calls}) == 2


async def test_a_failing_run_is_an_error_the_sdk_raises(
    settings: Settings, boundary: ModelBoundary
) -> None:
    # "outcome": each model call of this boundary follows the boundary's script in turn.
    boundary.script_scope({"op": "complete", "text": "scripted answer"})
    boundary.script_scope({"op": "fail", "message": "model exploded"})
    with live_server(api_harness(settings, boundary, profile="outcome")) as server:
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            answered = await client.runs.wait(tid, "outcome", input=human("answer"))
            created: list[Any] = []
            with pytest.raises(Exception) as failed:  # noqa: PT011 (the SDK raises a bare Exception)
                await client.runs.wait(
                    tid, "outcome", input=human("fail"), on_run_created=created.append
                )
            (failed_run,) = created
            joined = await client.runs.join(tid, failed_run["run_id"])
            run = await client.runs.get(tid, failed_run["run_id"])
            thread = await client.threads.get(tid)
            # The stream of a failed run: `error` then `end`.
            replay = await collect(
                client.runs.join_stream(tid, failed_run["run_id"], last_event_id="-1")
            )
    assert isinstance(answered, dict)
    assert text_of(last_ai(answered)) == "scripted answer"
    assert type(failed.value) is Exception
    assert isinstance(joined, dict)
    assert set(joined["__error__"]) >= {"error", "message"}
    assert str(failed.value).startswith(f"{joined['__error__']['error']}: ")
    assert run["status"] == "error"
    assert thread["status"] == "error"
    assert [p.event for p in replay][-2:] == ["error", "end"]
    assert replay[-1].data["status"] == "error"
    assert model_inputs(boundary.calls()) == ["answer", "fail"]


async def test_stateless_runs_stream_and_wait_in_a_session_of_their_own(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:
        async with sdk(server.url) as client:
            created: list[Any] = []
            parts = await collect(
                client.runs.stream(
                    None,
                    "confirmed",
                    input=human("stateless stream"),
                    stream_mode=STREAM_MODES,
                    on_run_created=created.append,
                )
            )
            waited = await client.runs.wait(None, "confirmed", input=human("stateless wait"))
            with pytest.raises(Exception) as resumed:  # noqa: PT011 (checked below)
                await client.runs.wait(None, "confirmed", command={"resume": "approve_once"})
    run_id = run_id_of(parts)
    assert [c["run_id"] for c in created] == [run_id]
    assert parts[-1].event == "end"
    assert parts[-1].data["status"] == "success"
    final = [p.data for p in parts if p.event == "values"][-1]
    assert text_of(last_ai(final)) == "native-result"
    assert any(p.event == "messages" for p in parts)
    assert isinstance(waited, dict)
    assert text_of(last_ai(waited)) == "native-result"
    problem(resumed.value, 422)
    # Two runs, each the only one of its session; the model saw each input once.
    calls = boundary.calls()
    assert model_inputs(calls) == ["stateless stream", "stateless wait"]
    assert "stateless stream" not in texts(calls[1])


async def test_the_sync_client_speaks_the_same_dialect(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:

        def drive() -> tuple[dict[str, Any], list[Any]]:
            with get_sync_client(url=server.url, api_key=TOKENS["alpha"]) as client:
                tid = client.threads.create()["thread_id"]
                parts = list(client.runs.stream(tid, "confirmed", input=human("sync")))
                state = client.threads.get_state(tid)
                return dict(state), parts

        state, parts = await asyncio.to_thread(drive)
    assert parts[0].event == "metadata"
    assert parts[-1].event == "end"
    # stream_mode defaults to "values": nothing else is sent.
    assert {p.event for p in parts} == {"metadata", "values", "end"}
    assert text_of(last_ai(state["values"])) == "native-result"
    assert model_inputs(boundary.calls()) == ["sync"]


async def test_a_run_on_an_unknown_thread_is_404_unless_it_may_create_it(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:
        async with sdk(server.url) as client:
            with pytest.raises(httpx.HTTPStatusError) as unknown:
                await client.runs.wait("no-such-thread", "confirmed", input=human("lost"))
            made = await client.runs.wait(
                "made-by-its-run", "confirmed", input=human("made"), if_not_exists="create"
            )
            thread = await client.threads.get("made-by-its-run")
    problem(unknown.value, 404)
    assert isinstance(made, dict)
    assert text_of(last_ai(made)) == "native-result"
    assert thread["status"] == "idle"
    assert model_inputs(boundary.calls()) == ["made"]


async def test_ahp_events_without_a_langgraph_name_stream_as_custom(
    settings: Settings, boundary: ModelBoundary
) -> None:
    # "metered": each model call reports 7 input and 3 output tokens.
    with live_server(api_harness(settings, boundary, profile="metered")) as server:
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            parts = await collect(
                client.runs.stream(tid, "metered", input=human("count"), stream_mode="custom")
            )
    assert parts[0].event == "metadata"
    assert parts[-1].event == "end"
    custom = [p.data for p in parts[1:-1]]
    assert {p.event for p in parts[1:-1]} == {"custom"}
    assert "usage_changed" in {event["ahp_event"] for event in custom}
    assert model_inputs(boundary.calls()) == ["count"]


async def test_a_stateless_run_kept_on_completion_leaves_a_thread_to_go_on_with(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:
        async with sdk(server.url) as client:
            created: list[Any] = []
            first = await client.runs.wait(
                None,
                "confirmed",
                input=human("kept"),
                on_completion="keep",
                on_run_created=created.append,
            )
            tid = created[0]["thread_id"]
            thread = await client.threads.get(tid)
            state = await client.threads.get_state(tid)
            second = await client.runs.wait(tid, "confirmed", input=human("and more"))
            runs = await client.runs.list(tid)
    assert isinstance(first, dict)
    assert thread["thread_id"] == tid
    assert thread["status"] == "idle"
    assert text_of(last_ai(state["values"])) == "native-result"
    assert isinstance(second, dict)
    assert [m["type"] for m in second["messages"]] == ["human", "ai", "human", "ai"]
    assert len(runs) == 2
    # The second run went on with the first one's conversation, at the model.
    calls = boundary.calls()
    assert model_inputs(calls) == ["kept", "and more"]
    assert "kept" in texts(calls[1])
