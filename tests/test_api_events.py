"""A task's events as Server-Sent Events, resumed with ``Last-Event-ID``."""

from __future__ import annotations

import httpx

from wire.settings import Settings

from .support.api import (
    SseEvent,
    api_harness,
    auth,
    in_process,
    live_server,
    problem_of,
    read_events,
)
from .support.boundary import ModelBoundary
from .support.waiting import wait_for


def _ids(events: list[SseEvent]) -> list[str]:
    return [event.id for event in events]


async def test_the_event_stream_ends_with_the_outcome_and_resumes_after_any_event(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary, profile="slow")) as client:
        session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        task = (
            await client.post(
                f"/v1/sessions/{session_id}/tasks",
                json={"input": "stream it"},
                params={"wait": 30},
                headers=auth(),
            )
        ).json()
        url = f"/v1/tasks/{task['id']}/events"
        async with client.stream("GET", url, headers=auth()) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            full = await read_events(response)
        names = [event.event for event in full]
        assert names[0] == "task_started"
        assert names[-1] == "task_completed"
        assert full[-1].data["outcome"] == task["outcome"]
        deltas = [event.data["text"] for event in full if event.event == "message_delta"]
        # The slow profile streams 20 chunks, then its reply.
        assert deltas == [f"chunk{index} " for index in range(20)] + ["native-result"]
        assert len(set(_ids(full))) == len(full)

        for cut in (0, 7, len(full) - 2):
            async with client.stream(
                "GET", url, headers={**auth(), "Last-Event-ID": full[cut].id}
            ) as response:
                rest = await read_events(response)
            assert _ids(rest) == _ids(full[cut + 1 :])
            assert [event.data for event in rest] == [event.data for event in full[cut + 1 :]]
        # Resuming after the terminal event ends at once, with nothing.
        async with client.stream(
            "GET", url, headers={**auth(), "Last-Event-ID": full[-1].id}
        ) as response:
            assert await read_events(response) == []

        malformed = await client.get(url, headers={**auth(), "Last-Event-ID": "not-an-id"})
        assert malformed.status_code == 422
        assert problem_of(malformed)["issues"][0]["path"] == "header.Last-Event-ID"


async def test_a_client_that_disconnects_mid_stream_resumes_without_gap_or_duplicate(
    settings: Settings, boundary: ModelBoundary
) -> None:
    harness = api_harness(settings, boundary, profile="streaming")
    with live_server(harness) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
            boundary.hold()  # the streaming profile holds before its reply
            task = (
                await client.post(
                    f"/v1/sessions/{session_id}/tasks", json={"input": "go"}, headers=auth()
                )
            ).json()
            url = f"/v1/tasks/{task['id']}/events"
            async with client.stream("GET", url, headers=auth()) as response:
                first = await read_events(response, limit=6)
            # The client went away mid-stream; the task goes on.
            assert (await client.get(f"/v1/tasks/{task['id']}", headers=auth())).json()[
                "state"
            ] in {"starting", "running"}
            await wait_for(lambda: boundary.calls_for(task["id"]))
            async with client.stream(
                "GET", url, headers={**auth(), "Last-Event-ID": first[-1].id}
            ) as response:
                boundary.release()
                rest = await read_events(response)
            async with client.stream("GET", url, headers=auth()) as response:
                whole = await read_events(response)
    resumed = first + rest
    assert _ids(resumed) == _ids(whole)
    assert [event.data for event in resumed] == [event.data for event in whole]
    assert resumed[-1].event == "task_completed"
    assert resumed[-1].data["outcome"]["output"]["text"].endswith("stream-complete")
