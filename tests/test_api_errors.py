"""Every refusal of the HTTP API: its status, its problem body, and that it changed nothing.

A refused request is compared against a snapshot of every Redis key before it: bad input
writes nothing (design invariant 6)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis

from wire.settings import Settings

from .support.api import TOKENS, api_harness, api_settings, auth, in_process, keyspace, problem_of
from .support.boundary import ModelBoundary
from .support.start_control import StartBoundary


async def _session(client: httpx.AsyncClient, tenant: str = "alpha") -> str:
    created = await client.post("/v1/sessions", json={}, headers=auth(tenant))
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


async def test_requests_without_a_valid_bearer_token_are_refused(
    settings: Settings,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with in_process(api_harness(settings, boundary)) as client:
        before = keyspace(sync_redis)
        for headers in (
            {},
            {"Authorization": "Bearer not-a-token-of-anyone"},
            {"Authorization": f"Basic {TOKENS['alpha']}"},
            {"Authorization": f"Bearer {TOKENS['alpha']}x"},
        ):
            refused = await client.post("/v1/sessions", json={}, headers=headers)
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith('Bearer realm="ahp"')
            body = problem_of(refused)
            assert body["type"].endswith("/unauthorized")
            assert all(token not in refused.text for token in TOKENS.values())
        assert keyspace(sync_redis) == before
        accepted = await client.post("/v1/sessions", json={}, headers=auth())
        assert accepted.status_code == 201
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert logged  # the harness and the API did log (at DEBUG and up)
    assert all(token not in logged for token in TOKENS.values())


def _normalized(response: httpx.Response, resource_id: str) -> tuple[int, dict[str, Any], str]:
    headers = {
        name: value
        for name, value in response.headers.items()
        if name not in {"content-length", "date"}
    }
    return response.status_code, headers, response.text.replace(resource_id, "<id>")


async def test_another_tenants_session_and_task_answer_exactly_like_unknown_ones(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        session_id = await _session(client)
        task = (
            await client.post(
                f"/v1/sessions/{session_id}/tasks",
                json={"input": "mine"},
                params={"wait": 30},
                headers=auth(),
            )
        ).json()
        unknown = "0" * 32
        interaction = {"response": {"kind": "answer", "text": "hi"}}
        requests: list[tuple[str, str, dict[str, Any] | None]] = [
            ("GET", "/v1/sessions/{}", None),
            ("DELETE", "/v1/sessions/{}", None),
            ("POST", "/v1/sessions/{}/tasks", {"input": "theirs"}),
            ("POST", "/v1/sessions/{}/reopen", None),
        ]
        task_requests: list[tuple[str, str, dict[str, Any] | None]] = [
            ("GET", "/v1/tasks/{}", None),
            ("GET", "/v1/tasks/{}/events", None),
            ("POST", "/v1/tasks/{}/cancel", None),
            ("POST", "/v1/tasks/{}/interactions/i-1", interaction),
        ]
        before = keyspace(sync_redis)
        for owned, templates in ((session_id, requests), (task["id"], task_requests)):
            for method, template, body in templates:
                theirs = await client.request(
                    method, template.format(owned), json=body, headers=auth("beta")
                )
                nobody = await client.request(
                    method, template.format(unknown), json=body, headers=auth("beta")
                )
                assert theirs.status_code == 404, (method, template, theirs.text)
                problem_of(theirs)
                assert _normalized(theirs, owned) == _normalized(nobody, unknown)
        assert keyspace(sync_redis) == before
        # The owner still has both, untouched.
        mine = await client.get(f"/v1/sessions/{session_id}", headers=auth())
        assert mine.status_code == 200
        assert mine.json()["closed"] is False
        assert (await client.get(f"/v1/tasks/{task['id']}", headers=auth())).json()[
            "state"
        ] == "completed"


async def test_malformed_requests_are_listed_issues_and_write_nothing(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        session_id = await _session(client)
        tasks_url = f"/v1/sessions/{session_id}/tasks"
        before = keyspace(sync_redis)
        cases: list[tuple[str, str, dict[str, str], str | bytes, str]] = [
            ("POST", tasks_url, {}, json.dumps({}), "body.input"),
            ("POST", tasks_url, {}, json.dumps({"input": ""}), "body.input"),
            ("POST", tasks_url, {}, json.dumps({"input": "x", "extra": 1}), "body.extra"),
            ("POST", tasks_url, {}, json.dumps({"input": "x", "if_busy": "later"}), "body.if_busy"),
            ("POST", tasks_url, {}, '{"input": "\\ud800"}', "body.input"),
            ("POST", tasks_url, {}, b'{"input": "x"', "body"),
            ("POST", tasks_url, {}, b"\xff\xfe", "body"),
            ("POST", tasks_url, {}, '{"input": ' + "[" * 100_000 + "]" * 100_000 + "}", "body"),
            ("POST", tasks_url, {}, '{"input": 1e999999}', "body.input"),
            ("POST", tasks_url, {}, '{"input": "x", "if_busy": ' + "9" * 5000 + "}", "body"),
            ("POST", tasks_url, {}, "[]", "body"),
            ("POST", tasks_url, {}, "null", "body"),
            ("POST", tasks_url, {"Idempotency-Key": "has space"}, '{"input":"x"}', "header"),
            ("POST", "/v1/sessions/bad$id/tasks", {}, '{"input":"x"}', "path.session_id"),
            ("GET", "/v1/sessions/" + "a" * 129, {}, "", "path.session_id"),
            ("GET", "/v1/sessions/a%0A", {}, "", "path.session_id"),
            ("GET", "/v1/tasks/..", {}, "", ""),
            ("GET", "/v1/tasks/x?wait=-1", {}, "", "query.wait"),
            ("GET", "/v1/tasks/x?wait=nan", {}, "", "query.wait"),
            ("POST", "/v1/sessions", {}, json.dumps({"instructions": 5}), "body.instructions"),
            (
                "POST",
                tasks_url,
                {},
                json.dumps({"input": "x", "webhook": {"url": "https://evil.example/hook"}}),
                "body.webhook.url",
            ),
        ]
        for method, url, headers, content, path in cases:
            refused = await client.request(
                method,
                url,
                content=content,
                headers={**auth(), "Content-Type": "application/json", **headers},
            )
            assert refused.status_code in {404, 422}, (url, content, refused.text)
            body = problem_of(refused)
            if refused.status_code == 422:
                assert body["type"].endswith("/invalid-request"), body
                assert any(issue["path"].startswith(path) for issue in body["issues"]), body
        assert keyspace(sync_redis) == before


async def test_requirements_the_harness_cannot_serve_are_listed(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        before = keyspace(sync_redis)
        refused = await client.post(
            "/v1/sessions", json={"instructions": "i" * 100_001}, headers=auth()
        )
        assert refused.status_code == 422
        body = problem_of(refused)
        assert body["type"].endswith("/incompatible-requirements")
        assert [issue["path"] for issue in body["issues"]] == ["instructions"]
        assert "100001" in body["issues"][0]["message"]
        assert keyspace(sync_redis) == before


async def test_oversized_bodies_and_inputs_are_refused_before_anything_is_written(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    limits = api_settings(max_body_bytes=4096, max_input_bytes=1024, max_instructions_bytes=512)
    async with in_process(api_harness(settings, boundary), limits) as client:
        session_id = await _session(client)
        tasks_url = f"/v1/sessions/{session_id}/tasks"
        before = keyspace(sync_redis)
        declared = await client.post(tasks_url, json={"input": "x" * 5000}, headers=auth())
        assert declared.status_code == 413
        assert problem_of(declared)["type"].endswith("/payload-too-large")

        async def chunks() -> AsyncIterator[bytes]:
            yield b'{"input": "'
            for _ in range(10):
                yield b"y" * 1000
            yield b'"}'

        chunked = await client.post(tasks_url, content=chunks(), headers=auth())
        assert chunked.status_code == 413
        problem_of(chunked)

        # Within the body limit, over the input limit (multi-byte characters count).
        wide = await client.post(tasks_url, json={"input": "é" * 600}, headers=auth())
        assert wide.status_code == 413
        assert problem_of(wide)["issues"][0]["path"] == "body.input"
        long_instructions = await client.post(
            "/v1/sessions", json={"instructions": "z" * 600}, headers=auth()
        )
        assert long_instructions.status_code == 413
        assert problem_of(long_instructions)["issues"][0]["path"] == "body.instructions"
        assert keyspace(sync_redis) == before
        # Within every limit, the same session still serves.
        fine = await client.post(tasks_url, json={"input": "é" * 400}, headers=auth())
        assert fine.status_code == 201, fine.text


async def test_an_idempotency_key_reused_with_another_input_is_refused(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        session_id = await _session(client)
        tasks_url = f"/v1/sessions/{session_id}/tasks"
        key = {"Idempotency-Key": "order-42"}
        first = await client.post(
            tasks_url, json={"input": "one"}, params={"wait": 30}, headers={**auth(), **key}
        )
        assert first.status_code == 201
        before = keyspace(sync_redis)
        reused = await client.post(tasks_url, json={"input": "two"}, headers={**auth(), **key})
        assert reused.status_code == 422
        body = problem_of(reused)
        assert body["type"].endswith("/idempotency-key-reused")
        assert body["task_id"] == first.json()["id"]
        assert keyspace(sync_redis) == before


async def test_a_start_the_broker_refused_is_503_and_safe_to_repeat(
    settings: Settings, boundary: ModelBoundary
) -> None:
    starts = StartBoundary()
    harness = api_harness(settings, boundary, publisher_factory=starts.publisher)
    async with in_process(harness) as client:
        session_id = await _session(client)
        starts.reject_before_delivery("broker down")
        refused = await client.post(
            f"/v1/sessions/{session_id}/tasks", json={"input": "retry me"}, headers=auth()
        )
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        body = problem_of(refused)
        assert body["type"].endswith("/transport-error")
        assert body["retry"] == "safe"
        assert "redis://" not in refused.text
        assert "Traceback" not in refused.text
        repeated = await client.post(
            f"/v1/sessions/{session_id}/tasks",
            json={"input": "retry me"},
            params={"wait": 30},
            headers=auth(),
        )
        assert repeated.status_code == 201
        assert repeated.json()["state"] == "completed"
        assert starts.never_accepted()
        assert repeated.json()["id"] not in starts.never_accepted()


async def test_an_unconfirmed_start_names_its_task_and_blocks_the_session(
    settings: Settings, boundary: ModelBoundary
) -> None:
    starts = StartBoundary()
    harness = api_harness(settings, boundary, publisher_factory=starts.publisher)
    async with in_process(harness) as client:
        session_id = await _session(client)
        starts.lose_acceptance_acknowledgement(True)
        unconfirmed = await client.post(
            f"/v1/sessions/{session_id}/tasks", json={"input": "maybe"}, headers=auth()
        )
        assert unconfirmed.status_code == 503
        body = problem_of(unconfirmed)
        assert body["type"].endswith("/start-unconfirmed")
        assert body["retry"] == "unsafe"
        assert body["session_id"] == session_id
        task_id = body["task_id"]
        assert f"/v1/tasks/{task_id}" in body["detail"]
        # The named task is there to look at (the broker did get it: it runs once).
        fate = await client.get(f"/v1/tasks/{task_id}", params={"wait": 30}, headers=auth())
        assert fate.status_code == 200, fate.text
        assert fate.json()["state"] == "completed", fate.text
        blocked = await client.post(
            f"/v1/sessions/{session_id}/tasks", json={"input": "more"}, headers=auth()
        )
        assert blocked.status_code == 409
        blocked_body = problem_of(blocked)
        assert blocked_body["type"].endswith("/session-blocked")
        assert blocked_body["session_id"] == session_id


async def test_unknown_routes_and_methods_answer_problems(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        missing = await client.get("/v1/nothing-here", headers=auth())
        assert missing.status_code == 404
        problem_of(missing)
        wrong = await client.put("/v1/sessions", headers=auth())
        assert wrong.status_code == 405
        assert problem_of(wrong)["type"].endswith("/method-not-allowed")
