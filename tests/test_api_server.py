"""The API behind a real uvicorn server: the network path itself (connections that drop,
chunked bodies) and a property-based run of its published OpenAPI document."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx

from wire.settings import Settings

from .support.api import api_harness, api_settings, auth, live_server, problem_of, read_events
from .support.boundary import ModelBoundary
from .support.waiting import wait_for


async def test_the_whole_lifecycle_over_a_real_connection(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            assert (await client.get("/healthz")).json() == {"status": "ok"}
            assert (await client.get("/readyz")).json() == {"status": "ok"}
            session = await client.post("/v1/sessions", json={}, headers=auth())
            assert session.status_code == 201
            session_id = session.json()["id"]
            task = await client.post(
                f"/v1/sessions/{session_id}/tasks",
                json={"input": "over tcp"},
                params={"wait": 30},
                headers=auth(),
            )
            assert task.status_code == 201
            assert task.json()["outcome"]["output"]["text"] == "native-result"
            async with client.stream(
                "GET", f"/v1/tasks/{task.json()['id']}/events", headers=auth()
            ) as response:
                events = await read_events(response)
            assert events[-1].data["outcome"] == task.json()["outcome"]
            released = await client.delete(f"/v1/sessions/{session_id}", headers=auth())
            assert released.json()["checkpoint_cleanup"] == "done"


async def _post_unread(url: str, path: str, body: dict[str, object]) -> asyncio.StreamWriter:
    """Send a request whole and leave its answer unread; closing the returned writer is
    the client going away."""
    parts = urlsplit(url)
    _, writer = await asyncio.open_connection(parts.hostname, parts.port)
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Authorization: {auth()['Authorization']}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    writer.write(head.encode() + payload)
    await writer.drain()
    return writer


async def test_a_waiting_client_that_disconnects_cancels_its_task_only_when_it_asked(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            outcomes = {}
            for cancel in (True, False):
                session_id = (await client.post("/v1/sessions", json={}, headers=auth())).json()[
                    "id"
                ]
                boundary.hold()
                calls_before = len(boundary.calls())
                flag = "true" if cancel else "false"
                connection = await _post_unread(
                    server.url,
                    f"/v1/sessions/{session_id}/tasks?wait=60&cancel_on_disconnect={flag}",
                    {"input": f"leave cancel={cancel}"},
                )
                # The request is being answered (its task reached the model): leave.
                await wait_for(lambda n=calls_before: len(boundary.calls()) > n)
                task_id = str(boundary.calls()[-1]["task"])
                connection.close()
                await connection.wait_closed()
                if cancel:
                    await wait_for(lambda t=task_id: boundary.was_cancelled(t))
                boundary.release()
                settled = await client.get(
                    f"/v1/tasks/{task_id}", params={"wait": 30}, headers=auth()
                )
                outcomes[cancel] = settled.json()["state"]
    assert outcomes == {True: "cancelled", False: "completed"}


async def test_bodies_over_the_limit_are_refused_on_the_wire_chunked_or_declared(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with live_server(api_harness(settings, boundary), api_settings(max_body_bytes=2048)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:

            async def chunks() -> AsyncIterator[bytes]:
                yield b'{"instructions": "'
                for _ in range(8):
                    yield b"z" * 512
                yield b'"}'

            refused = await client.post("/v1/sessions", content=chunks(), headers=auth())
            assert refused.status_code == 413
            assert problem_of(refused)["type"].endswith("/payload-too-large")
            declared = await client.post(
                "/v1/sessions",
                content=b'{"instructions": "' + b"z" * 5000 + b'"}',
                headers={**auth(), "Content-Type": "application/json"},
            )
            assert declared.status_code == 413
            problem_of(declared)
            # The server still serves after refusing them.
            assert (await client.get("/healthz")).status_code == 200
