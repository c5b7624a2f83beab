"""``Idempotency-Key``: a retried creation returns the same task, which runs once."""

from __future__ import annotations

import asyncio

from wire.settings import Settings

from .support.api import api_harness, auth, in_process
from .support.boundary import ModelBoundary


async def test_the_same_key_returns_the_same_task_and_the_model_runs_once(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        url = f"/v1/sessions/{session_id}/tasks"
        headers = {**auth(), "Idempotency-Key": "charge-7f3a"}
        first = await client.post(url, json={"input": "pay once"}, headers=headers)
        assert first.status_code == 201, first.text
        assert first.json()["replayed"] is False
        # A retry, while the task runs and after it settled: the same task each time.
        retry = await client.post(url, json={"input": "pay once"}, headers=headers)
        assert retry.status_code == 200, retry.text
        assert retry.json()["id"] == first.json()["id"]
        assert retry.json()["replayed"] is True
        settled = await client.get(
            f"/v1/tasks/{first.json()['id']}", params={"wait": 30}, headers=auth()
        )
        assert settled.json()["state"] == "completed"
        late = await client.post(
            url, json={"input": "pay once"}, params={"wait": 5}, headers=headers
        )
        assert late.status_code == 200
        assert late.json()["id"] == first.json()["id"]
        assert late.json()["outcome"] == settled.json()["outcome"]
        calls = [call for call in boundary.calls() if "pay once" in "\n".join(call["texts"])]  # type: ignore[arg-type]
        assert [call["task"] for call in calls] == [first.json()["id"]]


async def test_concurrent_requests_with_one_key_start_one_task(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        url = f"/v1/sessions/{session_id}/tasks"
        headers = {**auth(), "Idempotency-Key": "concurrent-1"}
        boundary.hold()
        answers = await asyncio.gather(
            *(client.post(url, json={"input": "only one"}, headers=headers) for _ in range(5))
        )
        assert sorted(answer.status_code for answer in answers) == [200, 200, 200, 200, 201]
        assert len({answer.json()["id"] for answer in answers}) == 1
        boundary.release()
        task_id = answers[0].json()["id"]
        settled = await client.get(f"/v1/tasks/{task_id}", params={"wait": 30}, headers=auth())
        assert settled.json()["state"] == "completed"
        assert [call["task"] for call in boundary.calls()] == [task_id]


async def test_keys_are_per_session_and_a_key_never_reaches_another_tenant(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        mine = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        theirs = (await client.post("/v1/sessions", json={}, headers=auth("beta"))).json()["id"]
        key = {"Idempotency-Key": "shared-key"}
        one = await client.post(
            f"/v1/sessions/{mine}/tasks", json={"input": "a"}, headers={**auth(), **key}
        )
        other = await client.post(
            f"/v1/sessions/{theirs}/tasks", json={"input": "a"}, headers={**auth("beta"), **key}
        )
        assert one.status_code == 201
        assert other.status_code == 201
        assert one.json()["id"] != other.json()["id"]
