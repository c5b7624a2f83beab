"""The API applies each tenant's limits from its settings (docs/tenants.md): past the rate
or the queued limit a start is answered 429 with a problem body, changes nothing, and
another tenant is not affected. Limits come from ``AHP_API_TENANT_LIMITS`` and
``AHP_API_DEFAULT_TENANT_LIMITS``."""

from __future__ import annotations

import asyncio
import json
from uuid import uuid4

import httpx
import pytest
import redis
from pydantic import ValidationError

from harness.api.settings import ApiSettings
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings
from wire.tenants import TenantLimits

from .support.api import (
    api_harness,
    api_settings,
    in_process,
    keyspace,
    problem_of,
    settled_keyspace,
)
from .support.boundary import ModelBoundary
from .support.langgraph import human
from .support.waiting import until


def _tenants() -> dict[str, str]:
    """Two tenants of this test only (their limits and lines are theirs alone)."""
    return {f"t-{uuid4().hex[:8]}": f"token-{uuid4().hex}" for _ in range(2)}


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _session(client: httpx.AsyncClient, token: str) -> str:
    created = await client.post("/v1/sessions", json={}, headers=_auth(token))
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def test_limits_are_read_per_tenant_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "AHP_API_TENANT_LIMITS",
        json.dumps({"acme": {"running": 8, "queued": 100, "starts_per_second": 2.5}}),
    )
    monkeypatch.setenv("AHP_API_DEFAULT_TENANT_LIMITS", json.dumps({"running": 2}))
    loaded = ApiSettings()
    assert loaded.limits_of("acme") == TenantLimits(running=8, queued=100, starts_per_second=2.5)
    assert loaded.limits_of("anyone-else") == TenantLimits(running=2)
    for bad in (
        {"acme": {"running": 0}},
        {"acme": {"starts_per_second": -1}},
        {"acme": {"concurrency": 3}},
        {"not a tenant!": {"running": 1}},
    ):
        monkeypatch.setenv("AHP_API_TENANT_LIMITS", json.dumps(bad))
        with pytest.raises(ValidationError):
            ApiSettings()


async def test_past_the_rate_a_start_is_429_with_retry_after_and_changes_nothing(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    tokens = _tenants()
    (limited, limited_token), (_, other_token) = tokens.items()
    api = api_settings(
        tokens=tokens,
        # One start per 100 s: no token comes back while the test runs.
        tenant_limits={limited: TenantLimits(starts_per_second=0.01, burst=1)},
    )
    async with in_process(api_harness(settings, boundary), api) as client:
        session = await _session(client, limited_token)
        first = await client.post(
            f"/v1/sessions/{session}/tasks", json={"input": "1"}, headers=_auth(limited_token)
        )
        assert first.status_code == 201, first.text
        task_id = first.json()["id"]
        await until(
            lambda: sync_redis.hget(f"{settings.namespace}:task:{task_id}", "state") == "completed",
            "the first task settled",
        )
        before = await settled_keyspace(sync_redis, settings)
        refused = await client.post(
            f"/v1/sessions/{session}/tasks", json={"input": "2"}, headers=_auth(limited_token)
        )
        assert refused.status_code == 429, refused.text
        assert 90 <= int(refused.headers["retry-after"]) <= 100
        body = problem_of(refused)
        assert body["type"].endswith("/tenant-rate-limited")
        assert body["retry"] == "safe"
        assert limited in body["detail"]
        run = await client.post("/v1/tasks", json={"input": "3"}, headers=_auth(limited_token))
        assert run.status_code == 429, run.text
        assert keyspace(sync_redis, settings) == before
        # Another tenant starts as it likes.
        other_session = await _session(client, other_token)
        for n in range(3):
            started = await client.post(
                f"/v1/sessions/{other_session}/tasks?wait=30",
                json={"input": f"other {n}"},
                headers=_auth(other_token),
            )
            assert started.status_code in {200, 201}, started.text


async def test_past_the_queued_limit_a_start_is_429_and_changes_nothing(
    idle_queue_settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """On a queue no worker serves: nothing changes between the snapshots but what the
    refused start would write."""
    tokens = _tenants()
    (limited, token), _ = tokens.items()
    api = api_settings(tokens=tokens, tenant_limits={limited: TenantLimits(running=1, queued=1)})
    async with in_process(api_harness(idle_queue_settings, boundary), api) as client:
        started = []
        for n in range(2):
            response = await client.post("/v1/tasks", json={"input": f"{n}"}, headers=_auth(token))
            assert response.status_code == 201, response.text
            started.append(response.json())
        assert [task["queued"] for task in started] == [False, True]
        record = Keys(idle_queue_settings.namespace).task(started[0]["id"])
        await until(lambda: sync_redis.hget(record, TaskField.PUBLISHED) == "1", "confirmed")
        before = keyspace(sync_redis, idle_queue_settings)
        refused = await client.post("/v1/tasks", json={"input": "2"}, headers=_auth(token))
        assert refused.status_code == 429, refused.text
        assert "retry-after" not in refused.headers
        body = problem_of(refused)
        assert body["type"].endswith("/tenant-queue-full")
        assert keyspace(sync_redis, idle_queue_settings) == before
        metrics = await client.get("/metrics")
        parked = [line for line in metrics.text.splitlines() if 'state="parked"' in line]
        assert len(parked) == 1
        assert float(parked[0].split()[-1]) >= 1, parked
        async with asyncio.timeout(60):
            for task in started:
                cancel = await client.post(f"/v1/tasks/{task['id']}/cancel", headers=_auth(token))
                assert cancel.status_code in {200, 202}, cancel.text
                settled = await client.get(f"/v1/tasks/{task['id']}?wait=30", headers=_auth(token))
                assert settled.json()["state"] == "cancelled", settled.text


async def test_the_langgraph_dialect_meets_the_same_limits(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    tokens = _tenants()
    (limited, token), _ = tokens.items()
    api = api_settings(
        tokens=tokens, tenant_limits={limited: TenantLimits(starts_per_second=0.01, burst=1)}
    )
    key = {"x-api-key": token}
    body = {"assistant_id": "confirmed", "input": human("hello")}
    async with in_process(api_harness(settings, boundary), api) as client:
        thread = (await client.post("/threads", json={}, headers=key)).json()["thread_id"]
        first = await client.post(f"/threads/{thread}/runs/wait", json=body, headers=key)
        assert first.status_code == 200, first.text
        before = await settled_keyspace(sync_redis, settings)
        for path in (f"/threads/{thread}/runs", "/runs/wait"):
            refused = await client.post(path, json=body, headers=key)
            assert refused.status_code == 429, refused.text
            assert int(refused.headers["retry-after"]) >= 1
            assert problem_of(refused)["type"].endswith("/tenant-rate-limited")
        assert keyspace(sync_redis, settings) == before
