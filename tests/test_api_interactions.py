"""Approvals over HTTP: a task awaiting its caller lists what it waits for, the answer is
checked before it is sent, resumes the task on the workers, and a second answer is
refused. The effect is counted where it happens (the worker), in Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from wire.settings import Settings

from .support.api import api_harness, auth, in_process, problem_of
from .support.boundary import ModelBoundary


async def _awaiting(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            task: dict[str, Any] = (await client.get(f"/v1/tasks/{task_id}", headers=auth())).json()
            if task["state"] == "awaiting_response":
                return task
            await asyncio.sleep(0.02)


async def test_an_approval_is_listed_checked_and_answered_once_over_http(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary, "guarding")) as client:
        session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        started = await client.post(
            f"/v1/sessions/{session_id}/tasks", json={"input": "guarded"}, headers=auth()
        )
        task = await _awaiting(client, started.json()["id"])
        (pending,) = task["pending_interactions"]
        assert pending["kind"] == "approval"
        assert pending["work_id"]
        assert pending["session_grant"] is None
        assert "approve_for_session" not in pending["available_decisions"]
        url = f"/v1/tasks/{task['id']}/interactions/{pending['interaction_id']}"

        offered_not = await client.post(
            url,
            json={"response": {"kind": "approval", "decision": "approve_for_session"}},
            headers=auth(),
        )
        assert offered_not.status_code == 422
        assert problem_of(offered_not)["issues"][0]["path"] == "body.response"
        wrong_kind = await client.post(
            url, json={"response": {"kind": "answer", "text": "yes"}}, headers=auth()
        )
        assert wrong_kind.status_code == 422
        unknown = await client.post(
            f"/v1/tasks/{task['id']}/interactions/i-unknown",
            json={"response": {"kind": "approval", "decision": "approve_once"}},
            headers=auth(),
        )
        assert unknown.status_code == 404
        assert problem_of(unknown)["type"].endswith("/unknown-interaction")
        assert boundary.effect_count() == 0

        answered = await client.post(
            url,
            json={"response": {"kind": "approval", "decision": "approve_once"}},
            headers=auth(),
        )
        assert answered.status_code == 200, answered.text
        settled = (
            await client.get(f"/v1/tasks/{task['id']}", params={"wait": 30}, headers=auth())
        ).json()
        assert settled["state"] == "completed"
        assert settled["pending_interactions"] == []
        again = await client.post(
            url,
            json={"response": {"kind": "approval", "decision": "approve_once"}},
            headers=auth(),
        )
        assert again.status_code == 409
        assert problem_of(again)["type"].endswith("/interaction-closed")
        assert boundary.effect_count() == 1
