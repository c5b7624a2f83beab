"""The fast lane answers exactly as FastAPI does, and leaves everything else to it.

Every request here is sent to two apps on the same deployment: one with the lane, one
without (``create_app(fast_lane=False)``: FastAPI serves all). The answers must be the
same bytes once ids and times (which differ between two tasks) are masked, and the lane's
own count says which requests it served itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from harness.api import tasks
from harness.api.fast_lane import LaneApp
from wire.settings import Settings

from .support.api import api_harness, auth, in_process, read_events
from .support.boundary import ModelBoundary

_ID = re.compile(rb"[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
_ENTRY = re.compile(rb"\d{10,}-\d+")
_VOLATILE_HEADERS = {"content-length", "date", "location"}


def _masked(body: bytes) -> bytes:
    return _ENTRY.sub(b"<entry>", _TIME.sub(b"<time>", _ID.sub(b"<id>", body)))


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes

    @classmethod
    def of(cls, response: httpx.Response, body: bytes) -> Answer:
        headers = {
            name: value for name, value in response.headers.items() if name not in _VOLATILE_HEADERS
        }
        return cls(response.status_code, headers, _masked(body))


def _served(client: httpx.AsyncClient) -> dict[str, int]:
    lanes: dict[str, LaneApp] = client.app.state.fast_lane  # type: ignore[attr-defined]
    return {name: lane.served for name, lane in lanes.items()}


@asynccontextmanager
async def _two_apps(
    settings: Settings, boundary: ModelBoundary
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    async with AsyncExitStack() as stack:
        lane = await stack.enter_async_context(in_process(api_harness(settings, boundary)))
        plain = await stack.enter_async_context(
            in_process(api_harness(settings, boundary), fast_lane=False)
        )
        yield lane, plain


async def _send(client: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> Answer:
    async with client.stream(method, path, **kwargs) as response:
        body = await response.aread()
    return Answer.of(response, body)


async def _session(client: httpx.AsyncClient) -> str:
    reply = await client.post("/v1/sessions", json={}, headers=auth())
    return str(reply.json()["id"])


async def test_the_lane_serves_the_plain_requests_with_fastapis_answers(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with _two_apps(settings, boundary) as (lane, plain):
        before = _served(lane)
        answers: dict[str, list[Answer]] = {}
        for client in (lane, plain):
            sessions = [await _session(client) for _ in range(3)]
            key = f"key-{id(client)}"
            requests: dict[str, tuple[str, str, dict[str, Any]]] = {
                "create": (
                    "POST",
                    "/v1/sessions",
                    {"json": {"instructions": "Be brief.", "tools": []}},
                ),
                "start-wait": (
                    "POST",
                    f"/v1/sessions/{sessions[0]}/tasks",
                    {
                        "json": {"input": "lane, wait"},
                        "params": {"wait": "30"},
                        "headers": {"Idempotency-Key": key},
                    },
                ),
                "start-again": (
                    "POST",
                    f"/v1/sessions/{sessions[0]}/tasks",
                    {
                        "json": {"input": "lane, wait"},
                        "params": {"wait": "30"},
                        "headers": {"Idempotency-Key": key},
                    },
                ),
                "start-enqueued": (
                    "POST",
                    f"/v1/sessions/{sessions[1]}/tasks",
                    {
                        "json": {"input": "lane, enqueued", "if_busy": "enqueue"},
                        "params": {"wait": "30.5", "cancel_on_disconnect": "true"},
                    },
                ),
                "start-stream": (
                    "POST",
                    f"/v1/sessions/{sessions[2]}/tasks/stream",
                    {"json": {"input": "lane, stream"}},
                ),
                "run-wait": (
                    "POST",
                    "/v1/tasks",
                    {"json": {"input": "lane, run"}, "params": {"wait": "30"}},
                ),
                "run-stream": (
                    "POST",
                    "/v1/tasks/stream",
                    {
                        "json": {"input": "lane, run and stream"},
                        "params": {"cancel_on_disconnect": "false"},
                    },
                ),
            }
            for name, (method, path, kwargs) in requests.items():
                headers = {**auth(), **kwargs.pop("headers", {})}
                answer = await _send(client, method, path, headers=headers, **kwargs)
                answers.setdefault(name, []).append(answer)
        for name, (through_lane, through_fastapi) in answers.items():
            assert through_lane == through_fastapi, name
        assert answers["start-wait"][0].status == 201
        assert answers["start-again"][0].status == 200
        assert b"task_completed" in answers["run-stream"][0].body
        served = _served(lane)
        # Every request above went through the lane (three session creations each).
        assert {name: served[name] - before[name] for name in served} == {
            "create_session": 4,
            "start_task": 3,
            "start_task_streaming": 1,
            "run_task": 1,
            "run_task_streaming": 1,
        }


async def test_every_other_form_of_a_request_is_left_to_fastapi(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with _two_apps(settings, boundary) as (lane, plain):
        before = _served(lane)
        odd: dict[str, tuple[str, dict[str, Any]]] = {
            "no token": ("/v1/tasks", {"json": {"input": "x"}, "headers": {}}),
            "bad token": (
                "/v1/tasks",
                {"json": {"input": "x"}, "headers": {"Authorization": "Bearer nope"}},
            ),
            "lower-case scheme": (
                "/v1/tasks",
                {
                    "json": {"input": "x"},
                    "params": {"wait": "30"},
                    "headers": {"Authorization": auth()["Authorization"].lower()},
                },
            ),
            "wait spelt 3e1": ("/v1/tasks", {"json": {"input": "x"}, "params": {"wait": "3e1"}}),
            "wait too long": ("/v1/tasks", {"json": {"input": "x"}, "params": {"wait": "601"}}),
            "wait twice": (
                "/v1/tasks",
                {"json": {"input": "x"}, "params": [("wait", "1"), ("wait", "2")]},
            ),
            "cancel spelt 1": (
                "/v1/tasks/stream",
                {"json": {"input": "x"}, "params": {"cancel_on_disconnect": "1"}},
            ),
            "unknown field": ("/v1/tasks", {"json": {"input": "x", "colour": "red"}}),
            "empty input": ("/v1/tasks", {"json": {"input": ""}}),
            "not json": ("/v1/tasks", {"content": b"{input", "ctype": "application/json"}),
            "deep json": ("/v1/tasks", {"content": b"[" * 100_000, "ctype": "application/json"}),
            "text body": ("/v1/tasks", {"content": b'{"input": "x"}', "ctype": "text/plain"}),
            "no content type": ("/v1/tasks", {"content": b'{"input": "x"}', "ctype": None}),
            "idempotency on a run": (
                "/v1/tasks",
                {"json": {"input": "x"}, "headers": {"Idempotency-Key": "k"}},
            ),
            "bad session id": ("/v1/sessions/-bad-/tasks", {"json": {"input": "x"}}),
            "bad idempotency key": (
                "/v1/sessions/s1/tasks",
                {"json": {"input": "x"}, "headers": {"Idempotency-Key": "a b"}},
            ),
        }
        for name, (path, spec) in odd.items():
            answers = []
            for client in (lane, plain):
                headers = dict(spec.get("headers", auth()))
                kwargs: dict[str, Any] = {"headers": headers}
                if "params" in spec:
                    kwargs["params"] = spec["params"]
                if "json" in spec:
                    kwargs["json"] = spec["json"]
                else:
                    kwargs["content"] = spec["content"]
                    if spec["ctype"] is not None:
                        headers["Content-Type"] = spec["ctype"]
                answers.append(await _send(client, "POST", path, **kwargs))
            assert answers[0] == answers[1], name
        assert _served(lane) == before


async def test_the_lanes_answers_are_counted_under_their_route(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        reply = await client.post(
            "/v1/tasks", json={"input": "counted"}, params={"wait": "30"}, headers=auth()
        )
        assert reply.status_code == 201
        metrics = (await client.get("/metrics")).text
    line = 'ahp_api_requests_total{method="POST",route="/v1/tasks",status="201"}'
    assert line in metrics


async def test_a_stream_the_lane_serves_is_resumable_like_any(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        async with client.stream(
            "POST", "/v1/tasks/stream", json={"input": "resume me"}, headers=auth()
        ) as response:
            streamed = await read_events(response)
        task_id = streamed[0].data["id"]
        async with client.stream(
            "GET",
            f"/v1/tasks/{task_id}/events",
            headers={**auth(), "Last-Event-ID": streamed[2].id},
        ) as again:
            resumed = await read_events(again)
    assert [json.dumps(e.data) for e in resumed] == [json.dumps(e.data) for e in streamed[3:]]


async def test_errors_the_endpoints_raise_are_answered_as_the_app_answers_them(
    settings: Settings,
    boundary: ModelBoundary,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _two_apps(settings, boundary) as (lane, plain):
        before = _served(lane)
        unknown = "0" * 32
        answers = [
            await _send(
                client,
                "POST",
                f"/v1/sessions/{unknown}/tasks",
                json={"input": "nowhere"},
                headers=auth(),
            )
            for client in (lane, plain)
        ]
        assert answers[0] == answers[1]
        assert answers[0].status == 404
        assert _served(lane)["start_task"] == before["start_task"] + 1

        async def broken(*_: object, **__: object) -> None:
            raise RuntimeError("secret detail")

        # The lane calls the endpoint through the module: only the lane meets this one.
        monkeypatch.setattr(tasks, "run_task", broken)
        with pytest.raises(RuntimeError, match="secret detail"):  # the server logs it
            await lane.post("/v1/tasks", json={"input": "boom"}, headers=auth())
        assert _served(lane)["run_task"] == before["run_task"] + 1
        assert "unexpected RuntimeError on POST /v1/tasks" in caplog.text
        transport = httpx.ASGITransport(lane.app, raise_app_exceptions=False)  # type: ignore[attr-defined]
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as quiet:
            reply = await quiet.post("/v1/tasks", json={"input": "boom"}, headers=auth())
        assert reply.status_code == 500
        assert reply.headers["content-type"] == "application/problem+json"
        assert "secret" not in reply.text
        assert reply.json()["status"] == 500
