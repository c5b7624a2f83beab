"""Any API replica serves any id: handles attach from Redis on a miss, and a replica
that stops leaves its tenants' sessions and tasks to the others."""

from __future__ import annotations

import pytest

from wire.settings import Settings

from .support.api import (
    api_harness,
    auth,
    deployment_environment,
    in_process,
    owned_app,
    read_events,
)
from .support.boundary import ModelBoundary


async def test_a_second_replica_serves_a_session_and_task_the_first_created(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with (
        in_process(api_harness(settings, boundary)) as first,
        in_process(api_harness(settings, boundary)) as second,
    ):
        session_id = (await first.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        boundary.hold()
        task = (
            await second.post(
                f"/v1/sessions/{session_id}/tasks", json={"input": "elsewhere"}, headers=auth()
            )
        ).json()
        busy = await first.post(
            f"/v1/sessions/{session_id}/tasks", json={"input": "too"}, headers=auth()
        )
        assert busy.status_code == 409
        assert busy.json()["task_id"] == task["id"]
        boundary.release()
        settled = await first.get(f"/v1/tasks/{task['id']}", params={"wait": 30}, headers=auth())
        assert settled.json()["state"] == "completed"
        async with first.stream("GET", f"/v1/tasks/{task['id']}/events", headers=auth()) as r:
            events = await read_events(r)
        assert events[-1].data["outcome"] == settled.json()["outcome"]
        released = await second.delete(f"/v1/sessions/{session_id}", headers=auth())
        assert released.status_code == 200
        assert (await first.get(f"/v1/sessions/{session_id}", headers=auth())).status_code == 404
        gone = await first.post(
            f"/v1/sessions/{session_id}/tasks", json={"input": "late"}, headers=auth()
        )
        # The first replica's cached handle answers like any released session.
        assert gone.status_code == 404
        assert gone.json()["type"].endswith("/not-found")


async def test_releasing_a_session_another_replica_released_is_not_found(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with (
        in_process(api_harness(settings, boundary)) as first,
        in_process(api_harness(settings, boundary)) as second,
    ):
        session_id = (await first.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        assert (await second.delete(f"/v1/sessions/{session_id}", headers=auth())).is_success
        again = await first.delete(f"/v1/sessions/{session_id}", headers=auth())
        assert again.status_code == 404
        assert again.json()["session_id"] == session_id


async def test_a_replica_that_stops_leaves_its_sessions_and_running_tasks_to_the_others(
    settings: Settings, boundary: ModelBoundary, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in deployment_environment(settings).items():
        monkeypatch.setenv(name, value)
    async with in_process(api_harness(settings, boundary)) as survivor:
        # As uvicorn --factory runs it: the app builds its harness and detaches it at exit.
        async with owned_app() as stopping:
            session_id = (await stopping.post("/v1/sessions", json={}, headers=auth())).json()["id"]
            boundary.hold()
            task = (
                await stopping.post(
                    f"/v1/sessions/{session_id}/tasks", json={"input": "outlive"}, headers=auth()
                )
            ).json()
        # The replica is gone; the task was not cancelled and the session not released.
        boundary.release()
        settled = await survivor.get(f"/v1/tasks/{task['id']}", params={"wait": 30}, headers=auth())
        assert settled.json()["state"] == "completed", settled.text
        assert not boundary.was_cancelled(task["id"])
        session = await survivor.get(f"/v1/sessions/{session_id}", headers=auth())
        assert session.status_code == 200
        assert session.json()["closed"] is False
        more = await survivor.post(
            f"/v1/sessions/{session_id}/tasks",
            json={"input": "next"},
            params={"wait": 30},
            headers=auth(),
        )
        assert more.json()["state"] == "completed"
        assert (await survivor.delete(f"/v1/sessions/{session_id}", headers=auth())).json()[
            "checkpoint_cleanup"
        ] == "done"
