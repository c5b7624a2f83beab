"""The API behind a real uvicorn server: the network path itself (connections that drop,
chunked bodies) and a property-based run of its published OpenAPI document."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import redis

from wire.settings import Settings

from .support.api import (
    api_harness,
    api_process,
    api_settings,
    auth,
    keyspace,
    live_server,
    problem_of,
    read_events,
)
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


HEALTH = b"GET /healthz HTTP/1.1\r\nHost: api\r\n\r\n"


async def _health_on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """``GET /healthz`` on an open connection: the status line (empty if it was closed)."""
    writer.write(HEALTH)
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
    return head.split(b"\r\n", 1)[0]


@pytest.mark.processes
async def test_the_api_process_keeps_idle_connections_longer_than_clients_pool_them(
    settings: Settings, tmp_path: Path
) -> None:
    """uvicorn's default closes a connection after 5 s idle, while aiohttp pools one for
    15 s: a request sent as the server closes it is lost ("Server disconnected"; it cut
    a benchmark run short). ``ahp-celery api`` keeps idle connections for
    ``AHP_API_KEEP_ALIVE`` (75 s by default): one idle for 6 s still serves; with 1 s, the
    server closes it."""
    async with (
        api_process(settings, tmp_path / "default.log") as default,
        api_process(settings, tmp_path / "short.log", {"AHP_API_KEEP_ALIVE": "1"}) as short,
    ):
        kept = await asyncio.open_connection("127.0.0.1", default.port)
        closed = await asyncio.open_connection("127.0.0.1", short.port)
        try:
            for connection in (kept, closed):
                assert await _health_on(*connection) == b"HTTP/1.1 200 OK"
            await asyncio.sleep(6)
            assert await asyncio.wait_for(_health_on(*kept), 5) == b"HTTP/1.1 200 OK"
            # The short one was closed by the server long ago: end of stream, no answer.
            assert await asyncio.wait_for(closed[0].read(), 1) == b""
        finally:
            for _, writer in (kept, closed):
                writer.close()


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nHost: api\r\nX-Trace: a\x01b\r\n\r\n",
        b"GET /v1/sessions/\xc3\xa9 HTTP/1.1\r\nHost: api\r\n\r\n",
    ],
    ids=["control-character-in-a-header", "raw-utf8-in-the-request-line"],
)
async def test_a_request_that_is_not_http_gets_uvicorns_plain_400_and_writes_nothing(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis, request_bytes: bytes
) -> None:
    """What docs/http-api.md says of the one non-problem error: the parser refuses the
    request before the app sees it."""
    with live_server(api_harness(settings, boundary)) as server:
        before = keyspace(sync_redis)
        address = urlsplit(server.url)
        reader, writer = await asyncio.open_connection(address.hostname, address.port)
        try:
            writer.write(request_bytes)
            await writer.drain()
            async with asyncio.timeout(10):
                answer = await reader.read()
        finally:
            writer.close()
        after = keyspace(sync_redis)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer
    assert b"content-type: text/plain" in head.lower(), answer
    assert body.strip() == b"Invalid HTTP request received.", answer
    assert after == before
