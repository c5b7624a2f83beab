"""A session and its tasks through the HTTP API, in-process over the real harness."""

from __future__ import annotations

import redis

from wire.settings import Settings

from .support.api import api_harness, auth, in_process, problem_of
from .support.boundary import ModelBoundary
from .support.waiting import wait_for


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
        assert session["persistent"] is False
        assert session["closed"] is False
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
        assert kept.status_code == 200
        assert kept.json()["state"] == "completed"


async def test_a_persistent_session_keeps_its_context_and_reopens_with_new_instructions(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        created = await client.post(
            "/v1/sessions",
            json={"instructions": "first-instructions", "persistent": True},
            headers=auth(),
        )
        session_id = created.json()["id"]
        assert created.json()["persistent"] is True
        first = await client.post(
            f"/v1/sessions/{session_id}/tasks",
            json={"input": "remember marker-p1"},
            params={"wait": 30},
            headers=auth(),
        )
        assert first.json()["state"] == "completed"

        released = await client.delete(f"/v1/sessions/{session_id}", headers=auth())
        assert released.json() == {
            "id": session_id,
            "context_kept": True,
            "checkpoint_cleanup": "kept",
        }
        assert (await client.get(f"/v1/sessions/{session_id}", headers=auth())).status_code == 200

        reopened = await client.post(
            f"/v1/sessions/{session_id}/reopen",
            json={"instructions": "second-instructions"},
            headers=auth(),
        )
        assert reopened.status_code == 200, reopened.text
        assert reopened.json()["turns"] == 1
        second = await client.post(
            f"/v1/sessions/{session_id}/tasks",
            json={"input": "and now marker-p2"},
            params={"wait": 30},
            headers=auth(),
        )
        assert second.json()["state"] == "completed"
        last_call = boundary.calls_for(second.json()["id"])[-1]
        texts = "\n".join(last_call["texts"])  # type: ignore[arg-type]
        # The second turn sees the first turn's context and the new instructions.
        assert "marker-p1" in texts
        assert "second-instructions" in texts
        assert "first-instructions" not in texts
        # Reconfiguring a session this API holds open is refused, and says why.
        busy = await client.post(
            f"/v1/sessions/{session_id}/reopen", json={"instructions": "x"}, headers=auth()
        )
        assert busy.status_code == 409
        assert problem_of(busy)["type"].endswith("/session-open")
        await client.delete(f"/v1/sessions/{session_id}", headers=auth())


async def test_reopening_a_session_that_is_not_persistent_is_refused(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        refused = await client.post(f"/v1/sessions/{session_id}/reopen", headers=auth())
        assert refused.status_code == 409
        body = problem_of(refused)
        assert body["type"].endswith("/session-not-persistent")
        assert body["session_id"] == session_id


async def test_a_busy_session_rejects_or_queues_and_runs_queued_tasks_in_order(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        tasks_url = f"/v1/sessions/{session_id}/tasks"
        boundary.hold()
        first = (await client.post(tasks_url, json={"input": "first"}, headers=auth())).json()
        second = await client.post(
            tasks_url, json={"input": "second", "if_busy": "enqueue"}, headers=auth()
        )
        third = await client.post(
            tasks_url, json={"input": "third", "if_busy": "enqueue"}, headers=auth()
        )
        assert second.status_code == 201
        assert third.status_code == 201
        assert second.json()["queued"] is True
        assert second.json()["state"] == "starting"
        rejected = await client.post(tasks_url, json={"input": "fourth"}, headers=auth())
        assert rejected.status_code == 409
        body = problem_of(rejected)
        assert body["type"].endswith("/session-busy")
        assert body["session_id"] == session_id
        assert body["task_id"] == first["id"]

        session = (await client.get(f"/v1/sessions/{session_id}", headers=auth())).json()
        assert session["active_task_id"] == first["id"]
        assert session["queued_task_ids"] == [second.json()["id"], third.json()["id"]]

        boundary.release()
        last = await client.get(
            f"/v1/tasks/{third.json()['id']}", params={"wait": 30}, headers=auth()
        )
        assert last.json()["state"] == "completed", last.text
        order = [call["task"] for call in boundary.calls()]
        assert order == [first["id"], second.json()["id"], third.json()["id"]]
        for task in (first, second.json()):
            done = await client.get(f"/v1/tasks/{task['id']}", headers=auth())
            assert done.json()["state"] == "completed"


async def test_a_running_task_is_cancelled_over_http(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        boundary.hold()
        task = (
            await client.post(
                f"/v1/sessions/{session_id}/tasks", json={"input": "stop me"}, headers=auth()
            )
        ).json()
        await wait_for(lambda: boundary.calls_for(task["id"]))
        cancelled = await client.post(f"/v1/tasks/{task['id']}/cancel", headers=auth())
        assert cancelled.status_code == 202, cancelled.text
        assert cancelled.json()["cancel_requested"] is True
        settled = await client.get(f"/v1/tasks/{task['id']}", params={"wait": 30}, headers=auth())
        assert settled.json()["state"] == "cancelled", settled.text
        assert settled.json()["outcome"]["type"] == "cancelled"
        assert boundary.was_cancelled(task["id"])
        # Cancelling a settled task changes nothing.
        again = await client.post(f"/v1/tasks/{task['id']}/cancel", headers=auth())
        assert again.status_code == 202
        assert again.json()["outcome"] == settled.json()["outcome"]


async def test_answering_an_interaction_a_task_does_not_have_is_not_found(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        task = (
            await client.post(
                f"/v1/sessions/{session_id}/tasks",
                json={"input": "no questions"},
                params={"wait": 30},
                headers=auth(),
            )
        ).json()
        answered = await client.post(
            f"/v1/tasks/{task['id']}/interactions/approval-1",
            json={"response": {"kind": "approval", "decision": "approve_once"}},
            headers=auth(),
        )
        assert answered.status_code == 404
        body = problem_of(answered)
        assert body["type"].endswith("/unknown-interaction")
        assert body["task_id"] == task["id"]
