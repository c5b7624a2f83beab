"""A session and its tasks through the HTTP API, in-process over the real harness."""

from __future__ import annotations

import redis

from wire.settings import Settings

from .support.api import api_harness, auth, in_process, problem_of
from .support.boundary import ModelBoundary


async def test_a_session_runs_a_task_and_is_released(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        created = await client.post(
            "/v1/sessions", json={"instructions": "be brief"}, headers=auth()
        )
        assert created.status_code == 201, created.text
        session = created.json()
        assert created.headers["location"] == f"/v1/sessions/{session['id']}"
        assert session["persistent"] is False and session["closed"] is False
        assert session["turns"] == 0

        started = await client.post(
            f"/v1/sessions/{session['id']}/tasks",
            json={"input": "hello over http marker-h1"},
            params={"wait": 30},
            headers=auth(),
        )
        assert started.status_code == 201, started.text
        task = started.json()
        assert started.headers["location"] == f"/v1/tasks/{task['id']}"
        assert task["state"] == "completed", task
        assert task["outcome"]["type"] == "completed"
        assert task["outcome"]["output"] == {"text": "native-result", "complete": True}
        assert task["replayed"] is False
        assert any("marker-h1" in context for context in boundary.observed_contexts)

        again = await client.get(f"/v1/tasks/{task['id']}", headers=auth())
        assert again.status_code == 200
        assert again.json()["outcome"] == task["outcome"]

        read = await client.get(f"/v1/sessions/{session['id']}", headers=auth())
        assert read.json()["turns"] == 1
        assert read.json()["active_task_id"] in {None, task["id"]}

        released = await client.delete(f"/v1/sessions/{session['id']}", headers=auth())
        assert released.status_code == 200, released.text
        assert released.json() == {
            "id": session["id"],
            "context_kept": False,
            "checkpoint_cleanup": "done",
        }
        gone = await client.get(f"/v1/sessions/{session['id']}", headers=auth())
        assert gone.status_code == 404
        assert problem_of(gone)["session_id"] == session["id"]
        # The task stays readable for its retention after the session went.
        kept = await client.get(f"/v1/tasks/{task['id']}", headers=auth())
        assert kept.status_code == 200 and kept.json()["state"] == "completed"
