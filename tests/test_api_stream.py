"""Start a task and stream its events in one response (``POST .../tasks/stream``)."""

from __future__ import annotations

import httpx

from wire.settings import Settings

from .support.api import (
    api_harness,
    auth,
    in_process,
    live_server,
    next_events,
    problem_of,
    read_events,
)
from .support.boundary import ModelBoundary
from .support.waiting import wait_for


async def test_start_and_stream_sends_the_task_then_every_event_and_resumes_like_get(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary, profile="slow")) as client:
        session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        async with client.stream(
            "POST",
            f"/v1/sessions/{session_id}/tasks/stream",
            json={"input": "start and stream"},
            headers=auth(),
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            streamed = await read_events(response)
        created, rest = streamed[0], streamed[1:]
        assert (created.event, created.id) == ("task_created", "0-0")
        task_id = created.data["id"]
        assert created.data["session_id"] == session_id
        assert response.headers["location"] == f"/v1/tasks/{task_id}"
        assert created.data["state"] == "starting"
        assert created.data["created_at"] is not None
        assert rest[0].event == "task_started"
        assert rest[-1].event == "task_completed"
        deltas = [event.data["text"] for event in rest if event.event == "message_delta"]
        assert deltas == [f"chunk{index} " for index in range(20)] + ["native-result"]
        # The model ran the task once, with this input.
        assert [call["task"] for call in boundary.calls()] == [task_id]
        # Its ids are the task's stream ids: GET from 0-0 (or any of them) continues exactly.
        url = f"/v1/tasks/{task_id}/events"
        for cut in (0, 5):
            async with client.stream(
                "GET", url, headers={**auth(), "Last-Event-ID": streamed[cut].id}
            ) as again:
                resumed = await read_events(again)
            assert [e.id for e in resumed] == [e.id for e in streamed[cut + 1 :]]
            assert [e.data for e in resumed] == [e.data for e in streamed[cut + 1 :]]


async def test_start_and_stream_refusals_are_problems_sent_before_any_event(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        path = f"/v1/sessions/{session_id}/tasks/stream"
        boundary.hold()
        first = await client.post(
            f"/v1/sessions/{session_id}/tasks", json={"input": "hold"}, headers=auth()
        )
        await wait_for(lambda: boundary.in_flight() == 1)
        busy = await client.post(path, json={"input": "busy"}, headers=auth())
        assert busy.status_code == 409
        assert busy.headers["content-type"].startswith("application/problem+json")
        assert problem_of(busy)["task_id"] == first.json()["id"]
        unknown = await client.post(
            "/v1/sessions/" + "0" * 32 + "/tasks/stream", json={"input": "x"}, headers=auth()
        )
        assert unknown.status_code == 404
        other_tenant = await client.post(path, json={"input": "x"}, headers=auth("beta"))
        assert other_tenant.status_code == 404
        # Another tenant's session is answered exactly like an unknown one (ids aside).
        assert other_tenant.text.replace(session_id, "<id>") == unknown.text.replace(
            "0" * 32, "<id>"
        )
        boundary.release()
        assert [str(call["texts"][-1]) for call in boundary.calls()] == ["hold"]  # type: ignore[index]


async def test_a_streaming_client_that_disconnects_cancels_its_task_only_when_it_asked(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            states = {}
            for cancel in (True, False):
                session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()[
                    "id"
                ]
                boundary.hold()
                calls = len(boundary.calls())
                async with client.stream(
                    "POST",
                    f"/v1/sessions/{session_id}/tasks/stream",
                    params={"cancel_on_disconnect": "true" if cancel else "false"},
                    json={"input": f"stream and leave {cancel}"},
                    headers=auth(),
                ) as response:
                    # Connected until the block ends: the iterator is kept (dropping it
                    # may close the connection at once).
                    lines = response.aiter_lines()
                    created = (await next_events(lines, limit=1))[0]
                    await wait_for(lambda n=calls: len(boundary.calls()) > n)
                task_id = created.data["id"]  # the client left with the task running
                if cancel:
                    await wait_for(lambda t=task_id: boundary.was_cancelled(t))
                boundary.release()
                settled = await client.get(
                    f"/v1/tasks/{task_id}", params={"wait": 30}, headers=auth()
                )
                states[cancel] = settled.json()["state"]
    assert states == {True: "cancelled", False: "completed"}
