"""The event-stream response (``harness.api.sse``): the terminal event ends the response
in the same write, disconnects close the stream, idle streams are pinged, a server told to
exit ends them, and a client that stops at the terminal event keeps its connection.

Observations: the ASGI messages the app sends (what uvicorn writes, one socket write per
body message) and, for the connection, the HTTP client's own connection events.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import aiohttp
import pytest
from agent_harness_protocol import Cancelled
from sse_starlette.sse import AppStatus

from harness import CeleryHarness
from harness.api.sse import PING, EventStream, FinalChunk
from wire.settings import Settings

from .support.api import api_harness, api_process, auth, in_process, live_server
from .support.boundary import ModelBoundary

TERMINAL = (b"event: task_completed", b"event: task_failed", b"event: task_cancelled")


class Exchange:
    """One request as a server runs it: the request body, then nothing until the client
    disconnects (``disconnect()``); every message the app sends is kept."""

    def __init__(self, method: str, path: str, body: bytes = b"", headers: Any = ()) -> None:
        self.scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"api"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
            "state": {},
        }
        self.sent: list[dict[str, Any]] = []
        self._body = body
        self._delivered = False
        self._gone = asyncio.Event()

    def disconnect(self) -> None:
        self._gone.set()

    async def receive(self) -> dict[str, Any]:
        if not self._delivered:
            self._delivered = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(dict(message))

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [message for message in self.sent if message["type"] == "http.response.body"]


def _headers() -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode(), value.encode()) for name, value in auth().items()]


async def test_a_task_stream_ends_with_its_terminal_event_in_one_write(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        app = client.app  # type: ignore[attr-defined]
        run = Exchange("POST", "/v1/tasks/stream", b'{"input": "one write"}', _headers())
        await asyncio.wait_for(app(run.scope, run.receive, run.send), 60)
        assert run.sent[0]["status"] == 200
        *events, last = run.bodies
        # The terminal event and the end of the response are one message: one write.
        assert any(kind in last["body"] for kind in TERMINAL), last
        assert last["more_body"] is False
        assert all(message["more_body"] is True for message in events)
        assert all(not any(kind in m["body"] for kind in TERMINAL) for m in events)
        # The resumed stream of the same task ends the same way.
        created = events[0]["body"].decode()
        task_id = created.split('"id":"', 1)[1].split('"', 1)[0]
        again = Exchange("GET", f"/v1/tasks/{task_id}/events", headers=_headers())
        await asyncio.wait_for(app(again.scope, again.receive, again.send), 60)
        assert b"event: task_completed" in again.bodies[-1]["body"]
        assert again.bodies[-1]["more_body"] is False
        assert b"".join(m["body"] for m in again.bodies) in b"".join(m["body"] for m in run.bodies)


async def test_a_client_that_stops_at_the_terminal_event_keeps_its_connection(
    settings: Settings, boundary: ModelBoundary
) -> None:
    """aiohttp (like most HTTP clients) closes a connection whose response it left
    unfinished: an end written apart from the terminal event cost a new connection."""
    opened: list[object] = []

    async def on_create(*_: object) -> None:
        opened.append(object())

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(on_create)
    with live_server(api_harness(settings, boundary)) as server:
        async with aiohttp.ClientSession(server.url, trace_configs=[trace]) as client:
            for index in range(5):
                async with client.post(
                    "/v1/tasks/stream", json={"input": f"run {index}"}, headers=auth()
                ) as response:
                    assert response.status == 200
                    seen = b""
                    async for chunk in response.content.iter_any():
                        seen += chunk
                        if any(kind in seen for kind in TERMINAL):
                            break  # stop reading at the terminal event
                    assert b"event: task_completed" in seen
    assert len(opened) == 1, f"{len(opened)} connections for 5 streams"


@dataclass
class Running:
    """A stream under way: its first event sent, the second held until ``release``."""

    exchange: Exchange
    call: asyncio.Future[None]
    release: asyncio.Event
    closed: list[str]


async def _running(ping: timedelta | None = None) -> Running:
    started, release, closed = asyncio.Event(), asyncio.Event(), []

    async def chunks() -> AsyncIterator[bytes]:
        try:
            started.set()
            yield b"id: 1-0\r\nevent: task_started\r\ndata: {}\r\n\r\n"
            await release.wait()
            yield FinalChunk(b"id: 2-0\r\nevent: task_completed\r\ndata: {}\r\n\r\n")
        finally:
            closed.append("closed")

    exchange = Exchange("GET", "/events")
    response = EventStream(chunks()) if ping is None else EventStream(chunks(), ping=ping)
    call = asyncio.ensure_future(response(exchange.scope, exchange.receive, exchange.send))
    await asyncio.wait_for(started.wait(), 5)
    return Running(exchange, call, release, closed)


async def test_a_disconnect_stops_the_stream_and_closes_its_events() -> None:
    stream = await _running()
    await asyncio.sleep(0.05)
    stream.exchange.disconnect()
    await asyncio.wait_for(stream.call, 5)  # returns, without raising the stop's cancellation
    assert stream.closed == ["closed"]
    assert [m["more_body"] for m in stream.exchange.bodies] == [True]  # the client is gone


async def test_an_idle_stream_is_pinged_then_ends_with_its_last_chunk() -> None:
    stream = await _running(ping=timedelta(milliseconds=50))
    while sum(m["body"] == PING for m in stream.exchange.bodies) < 2:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    stream.release.set()
    await asyncio.wait_for(stream.call, 5)
    bodies = stream.exchange.bodies
    assert bodies[-1]["more_body"] is False
    assert b"task_completed" in bodies[-1]["body"]
    assert stream.closed == ["closed"]
    # No ping after the end.
    await asyncio.sleep(0.2)
    assert stream.exchange.bodies == bodies


async def test_a_server_told_to_exit_ends_its_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = await _running(ping=timedelta(milliseconds=50))
    monkeypatch.setattr(AppStatus, "should_exit", True)
    await asyncio.wait_for(stream.call, 5)
    # Ended properly (the client resumes with Last-Event-ID), its events closed.
    end = {"type": "http.response.body", "body": b"", "more_body": False}
    assert stream.exchange.bodies[-1] == end
    assert stream.closed == ["closed"]


async def test_a_head_request_sends_no_events() -> None:
    iterated: list[bool] = []

    async def chunks() -> AsyncIterator[bytes]:
        iterated.append(True)
        yield b"never"

    exchange = Exchange("HEAD", "/events")
    await asyncio.wait_for(
        EventStream(chunks())(exchange.scope, exchange.receive, exchange.send), 5
    )
    assert exchange.bodies == [{"type": "http.response.body", "body": b"", "more_body": False}]
    assert not iterated


async def test_a_cancellation_from_elsewhere_is_not_absorbed() -> None:
    stream = await _running()
    stream.call.cancel()  # the server cancels the request's task
    with pytest.raises(asyncio.CancelledError):
        await stream.call
    assert stream.closed == ["closed"]


@pytest.mark.processes
async def test_sigterm_to_the_api_process_ends_its_open_streams(
    settings: Settings, tmp_path: Path
) -> None:
    """The server's exit reaches the streams through uvicorn's own signal handling: an
    open stream ends properly (resumable), and the process does not wait for it."""
    # No worker reads this queue: the task stays queued and its stream open.
    nobody = {"AHP_QUEUE": f"ahp.nobody.{uuid4().hex[:8]}"}
    async with (
        api_process(settings, tmp_path / "api.log", nobody) as api,
        aiohttp.ClientSession(api.url) as client,
    ):
        async with client.post(
            "/v1/tasks/stream", json={"input": "never claimed"}, headers=auth()
        ) as response:
            first = await response.content.readuntil(b"\r\n\r\n")
            assert b"event: task_created" in first
            api.process.send_signal(signal.SIGTERM)
            rest = await asyncio.wait_for(response.content.read(), 10)
            assert response.content.at_eof()  # ended properly, not cut off
            assert not any(kind in rest for kind in TERMINAL)
        await asyncio.wait_for(api.process.wait(), 10)
    # Leave nothing for the session worker's sweeper to settle during a later test: the
    # never-claimed task is cancelled (settled at once, its session released with it).
    data = first.decode().split("data:", 1)[1].strip()
    task_id = json.loads(data)["id"]
    unserved = settings.model_copy(update={"queue": nobody["AHP_QUEUE"]})
    async with CeleryHarness(unserved) as harness:
        task = await harness.attach_task(task_id, tenant="alpha")
        await task.request_cancellation()
        assert isinstance(await asyncio.wait_for(task.await_outcome(), 10), Cancelled)
