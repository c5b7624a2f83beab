"""``GET /metrics``: the pool's task figures from Redis and the API's request counters,
in the Prometheus text format."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from wire.settings import Settings

from .support.api import api_harness, api_settings, auth, in_process, problem_of
from .support.boundary import ModelBoundary


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def _scrape(
    client: httpx.AsyncClient, **headers: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return _samples(response.text)


async def test_metrics_show_settled_tasks_timings_and_requests(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        before = await _scrape(client)
        session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        task = await client.post(
            f"/v1/sessions/{session_id}/tasks",
            json={"input": "count me"},
            params={"wait": 30},
            headers=auth(),
        )
        assert task.json()["state"] == "completed"
        await client.get("/v1/tasks/0000", headers=auth())  # a 404, counted by route
        after = await _scrape(client)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("ahp_tasks_started_total") == 1
    assert delta("ahp_tasks_settled_total", outcome="completed") == 1
    assert delta("ahp_task_duration_seconds_count") == 1
    assert delta("ahp_task_time_to_start_seconds_count") == 1
    assert delta("ahp_task_duration_seconds_bucket", le="+Inf") == 1
    assert ("ahp_broker_queue_depth", ()) in after
    assert ("ahp_tasks", (("state", "running"),)) in after
    route = "/v1/sessions/{session_id}/tasks"
    assert delta("ahp_api_requests_total", method="POST", route=route, status="201") == 1
    assert (
        delta("ahp_api_requests_total", method="GET", route="/v1/tasks/{task_id}", status="404")
        == 1
    )
    # Ids never become label values.
    assert not any(session_id in str(labels) for _, labels in after)


async def test_metrics_require_their_token_when_one_is_configured(
    settings: Settings, boundary: ModelBoundary
) -> None:
    token = "metrics-token-0123456789"
    limits = api_settings(metrics_token=SecretStr(token))
    async with in_process(api_harness(settings, boundary), limits) as client:
        refused = await client.get("/metrics", headers=auth())
        assert refused.status_code == 401
        problem_of(refused)
        assert await _scrape(client, Authorization=f"Bearer {token}")
