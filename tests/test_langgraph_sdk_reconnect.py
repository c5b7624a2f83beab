"""The official LangGraph Python client's own reconnects (issue 22): when the network
drops a streamed run or a waited one, the SDK goes back to the response's ``Location``
(with ``Last-Event-ID`` for a stream) and the caller gets the run's stream once, or its
values, as if nothing had happened. The drop is real: a proxy between the client and the
API aborts the connections (``tests.support.dropping_proxy``); the model boundary shows the
run was neither restarted nor cancelled.
"""

from __future__ import annotations

import asyncio
import re
from contextlib import aclosing
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.schema import StreamPart

from wire.settings import Settings

from .support.api import TOKENS, api_harness, live_server
from .support.boundary import ModelBoundary
from .support.dropping_proxy import dropping_proxy
from .support.langgraph import (
    STREAM_MODES,
    collect,
    held,
    human,
    last_ai,
    model_inputs,
    run_id_of,
    sdk,
    text_of,
    wire,
)
from .support.waiting import until

STREAMING = "streaming"


def _request_line(request: bytes) -> str:
    return request.split(b"\r\n", 1)[0].decode()


def _header(request: bytes, name: str) -> str | None:
    found = re.search(rb"\r\n" + name.encode() + rb": *([^\r\n]*)", request, re.IGNORECASE)
    return None if found is None else found.group(1).decode()


@pytest.mark.parametrize("stateless", [False, True], ids=["thread", "stateless"])
async def test_the_sdk_resumes_a_dropped_stream_from_its_last_event(
    settings: Settings, boundary: ModelBoundary, stateless: bool
) -> None:
    with (
        live_server(api_harness(settings, boundary, profile=STREAMING)) as server,
        held(boundary),
        dropping_proxy(server.url) as proxy,
    ):
        async with (
            sdk(server.url) as direct,
            get_client(url=proxy.url, api_key=TOKENS["alpha"]) as client,
        ):
            # A stateless run's stream reconnects through its session, named as a thread.
            given = None if stateless else (await direct.threads.create())["thread_id"]
            parts: list[StreamPart] = []
            seen_at_drop = 0
            # (An async generator: aclosing closes its connection however the loop ends.)
            stream: Any = client.runs.stream(
                given, STREAMING, input=human("drop me"), stream_mode=STREAM_MODES
            )
            async with aclosing(stream) as open_stream:
                async for part in open_stream:
                    parts.append(part)
                    if len(parts) == 6:
                        # The network drops the stream; the run goes on, and ends.
                        seen_at_drop = len(proxy.requests)
                        proxy.drop()
                        boundary.release()
            rid = run_id_of(parts)
            tid = str(parts[0].data["thread_id"])
            replay = await collect(direct.runs.join_stream(tid, rid, last_event_id="-1"))

    assert replay[-1].event == "end"
    # Through the drop the caller saw the run's stream exactly once, in order.
    assert wire(parts) == wire(replay)
    # The SDK went back to the stream's Location with the last id it had.
    reconnects = proxy.requests[seen_at_drop:]
    assert reconnects, "the SDK never reconnected"
    assert _request_line(reconnects[0]) == f"GET /threads/{tid}/runs/{rid}/stream HTTP/1.1"
    assert _header(reconnects[0], "last-event-id") == parts[5].id
    # One model call: the drop neither restarted nor cancelled the run.
    calls = boundary.calls()
    assert model_inputs(calls) == ["drop me"]
    assert not boundary.was_cancelled(str(calls[0]["task"]))


@pytest.mark.filterwarnings("ignore:Request failed, attempting reconnect:UserWarning")
async def test_the_sdk_fetches_a_cut_off_wait_again_from_its_location(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with (
        live_server(api_harness(settings, boundary)) as server,
        held(boundary),
        dropping_proxy(server.url) as proxy,
    ):
        async with (
            sdk(server.url) as direct,
            get_client(url=proxy.url, api_key=TOKENS["alpha"]) as client,
        ):
            tid = (await direct.threads.create())["thread_id"]
            created: list[Any] = []
            waiting = client.runs.wait(
                tid,
                "confirmed",
                input=human("wait through a drop"),
                on_run_created=created.append,
            )
            waited = asyncio.ensure_future(waiting)
            await until(lambda: boundary.in_flight() == 1, "the run's model call")
            # The response has begun (its headers, Location among them, are out) when
            # the network drops it.
            await until(
                lambda: proxy.responses and proxy.responses[-1].startswith(b"HTTP/1.1 200"),
                "the wait response's headers before its body",
                within=10,
            )
            before = len(proxy.requests)
            proxy.drop()
            boundary.release()
            async with asyncio.timeout(60):
                values = await waited
            run = await direct.runs.get(tid, created[0]["run_id"])

    assert isinstance(values, dict)
    assert text_of(last_ai(values)) == "native-result"
    assert run["status"] == "success"
    again = proxy.requests[before:]
    assert again, "the SDK never fetched the run again"
    assert (
        _request_line(again[0]) == f"GET /threads/{tid}/runs/{created[0]['run_id']}/join HTTP/1.1"
    )
    assert model_inputs(boundary.calls()) == ["wait through a drop"]
