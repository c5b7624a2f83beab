"""A run's stream through the official LangGraph Python client (issue 22): a client that
disconnects and joins again with ``Last-Event-ID`` gets every event once (no gap, no
duplicate, at every position), and a cancelled run stops where the model runs.

"streaming": forty chunks over about two seconds, then (while the boundary holds) the
model waits before its reply, so a run stays running for as long as a test needs.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

from langgraph_sdk.schema import StreamPart

from wire.settings import Settings

from .support.api import api_harness, live_server
from .support.boundary import ModelBoundary
from .support.langgraph import (
    STREAM_MODES,
    assert_unique_ids,
    collect,
    held,
    human,
    last_ai,
    model_inputs,
    run_id_of,
    sdk,
    text_of,
    until_status,
    wire,
)
from .support.waiting import until

STREAMING = "streaming"


async def _follow(stream: Any, into: list[StreamPart]) -> None:
    async with aclosing(stream) as parts:
        async for part in parts:
            into.append(part)


async def test_a_joined_stream_after_a_disconnect_has_no_gap_and_no_duplicate(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary, profile=STREAMING)) as server, held(boundary):
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            # The client goes away after six parts (its connection closes); the run goes on.
            first = await collect(
                client.runs.stream(
                    tid, STREAMING, input=human("join me"), stream_mode=STREAM_MODES
                ),
                limit=6,
            )
            rid = run_id_of(first)
            assert (await client.runs.get(tid, rid))["status"] == "running"
            assert boundary.in_flight() == 1
            # It joins the running run from the last event it saw.
            joined: list[StreamPart] = []
            joining = asyncio.create_task(
                _follow(client.runs.join_stream(tid, rid, last_event_id=first[-1].id), joined)
            )
            try:
                await until(lambda: joined, "the joined stream's first event")
            finally:
                boundary.release()
            async with asyncio.timeout(60):
                await joining
            replay = await collect(client.runs.join_stream(tid, rid, last_event_id="-1"))
            unmarked = await collect(client.runs.join_stream(tid, rid))
            # From every position of the finished run's stream: exactly what follows it.
            resumed = [
                await collect(client.runs.join_stream(tid, rid, last_event_id=part.id))
                for part in replay
            ]
            values_only = await collect(
                client.runs.join_stream(tid, rid, stream_mode="values", last_event_id="-1")
            )

    assert replay[0].event == "metadata"
    assert replay[-1].event == "end"
    assert replay[-1].data["status"] == "success"
    assert_unique_ids(replay)
    ids = [part.id for part in replay]
    # What the client saw before and after its disconnect is the run's stream, once.
    assert wire(first + joined) == wire(replay)
    assert wire(unmarked) == wire(replay)
    for position, rest in enumerate(resumed):
        assert wire(rest) == wire(replay[position + 1 :]), f"after event {ids[position]}"
    assert {p.event for p in values_only} <= {"metadata", "values", "end"}
    assert [p.data for p in values_only if p.event == "values"] == [
        p.data for p in replay if p.event == "values"
    ]
    # The tokens streamed across the disconnect add up to the answer the model gave.
    tokens = "".join(text_of(p.data[0]) for p in replay if p.event == "messages")
    final = [p.data for p in replay if p.event == "values"][-1]
    assert tokens == text_of(last_ai(final))
    assert tokens == "".join(f"chunk{i} " for i in range(40)) + "stream-complete"
    # The model ran the run once: the disconnect neither stopped nor restarted it.
    calls = boundary.calls()
    assert model_inputs(calls) == ["join me"]
    assert not boundary.was_cancelled(str(calls[0]["task"]))


async def test_a_client_that_disconnects_with_on_disconnect_cancel_cancels_the_run(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary, profile=STREAMING)) as server, held(boundary):
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            first = await collect(
                client.runs.stream(
                    tid,
                    STREAMING,
                    input=human("leave"),
                    stream_mode=STREAM_MODES,
                    on_disconnect="cancel",
                ),
                limit=4,
            )
            rid = run_id_of(first)
            await until(lambda: boundary.calls(), "the model call")
            task_id = str(boundary.calls()[0]["task"])
            # Still held: only the cancellation can end the model call.
            await until(lambda: boundary.was_cancelled(task_id), "the cancellation at the model")
            await until(lambda: boundary.in_flight() == 0, "the model call to stop")
            await until_status(client, tid, rid, "interrupted")
            boundary.release()
    assert model_inputs(boundary.calls()) == ["leave"]


async def test_cancelling_a_streaming_run_ends_it_interrupted_and_stops_the_model(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary, profile=STREAMING)) as server, held(boundary):
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            parts: list[StreamPart] = []
            streaming = asyncio.create_task(
                _follow(
                    client.runs.stream(
                        tid, STREAMING, input=human("cancel me"), stream_mode=STREAM_MODES
                    ),
                    parts,
                )
            )
            await until(lambda: sum(p.event == "messages" for p in parts) >= 3, "three tokens")
            rid = run_id_of(parts)
            task_id = str(boundary.calls()[0]["task"])
            await client.runs.cancel(tid, rid)  # wait=0: 202, no body
            async with asyncio.timeout(30):
                await streaming
            run = await client.runs.get(tid, rid)
            # The model call stopped because of the cancellation (the boundary still holds).
            await until(lambda: boundary.in_flight() == 0, "the model call to stop")
            assert boundary.was_cancelled(task_id)
            thread = await client.threads.get(tid)
            state = await client.threads.get_state(tid)
            boundary.release()
            # A message after a cancel is a new turn, not a resume of the cancelled one.
            after = await client.runs.wait(tid, STREAMING, input=human("after the cancel"))

    assert parts[-1].event == "end"
    assert (parts[-1].data["run_id"], parts[-1].data["status"]) == (rid, "interrupted")
    assert run["status"] == "interrupted"
    tokens = [p for p in parts if p.event == "messages"]
    assert 3 <= len(tokens) < 41, len(tokens)
    assert "stream-complete" not in "".join(text_of(p.data[0]) for p in tokens)
    assert thread["status"] == "idle"
    assert state["interrupts"] == []
    assert isinstance(after, dict)
    assert text_of(last_ai(after)) == "".join(f"chunk{i} " for i in range(40)) + "stream-complete"
    calls = boundary.calls()
    assert model_inputs(calls) == ["cancel me", "after the cancel"]
    assert calls[1]["task"] != task_id


async def test_deleting_a_thread_cancels_its_run_and_cancel_can_wait_for_the_end(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server, held(boundary):
        async with sdk(server.url) as client:
            # cancel(wait=True): the run's final values once it ended.
            tid = (await client.threads.create())["thread_id"]
            run = await client.runs.create(tid, "confirmed", input=human("cancel and wait"))
            await until(lambda: boundary.in_flight() == 1, "the first run's model call")
            waited_task = str(boundary.calls()[0]["task"])
            # (Typed as returning None; with wait=True it returns the join's body.)
            cancel: Any = client.runs.cancel
            values = await cancel(tid, run["run_id"], wait=True)
            assert boundary.was_cancelled(waited_task)
            assert (await client.runs.get(tid, run["run_id"]))["status"] == "interrupted"
            # Deleting a thread cancels the run it is running.
            doomed = (await client.threads.create())["thread_id"]
            await client.runs.create(doomed, "confirmed", input=human("deleted under it"))
            await until(lambda: len(boundary.calls()) == 2, "the second run's model call")
            doomed_task = str(boundary.calls()[1]["task"])
            await client.threads.delete(doomed)
            await until(lambda: boundary.was_cancelled(doomed_task), "the deleted run's cancel")
            await until(lambda: boundary.in_flight() == 0, "the model calls to stop")
    assert isinstance(values, dict)
    assert model_inputs(boundary.calls()) == ["cancel and wait", "deleted under it"]
