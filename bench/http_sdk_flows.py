"""The LangGraph dialect's flows for ``bench/http_vs_harness.py``: ``runs.stream`` on a
thread and stateless, driven by the real ``langgraph-sdk`` client and, to tell the API's
cost from the client's, the same requests through the bench's aiohttp client.

* ``sdk-stream``     -- ``langgraph_sdk.get_client(url=..., api_key=...)``:
  ``client.runs.stream(thread_id, assistant, input={"messages": [...]},
  stream_mode=["values", "messages-tuple"])`` read to its ``end``. A fresh sample names a
  new thread and creates it in the same request (``if_not_exists="create"``), as the
  ``/v1`` session flow creates its session with its first task; the throughput chains'
  threads are created ahead by ``client.threads.create()``, as their sessions are. The
  thread is deleted afterwards (``client.threads.delete``, untimed).
* ``sdk-run-stream`` -- the stateless ``client.runs.stream(None, ...)``: a single-task
  session that ends with its run.
* ``lg-stream``, ``lg-run-stream`` -- the same requests with the same JSON body as the SDK
  sends (``POST /threads/{tid}/runs/stream``, ``POST /runs/stream``), sent and read by
  aiohttp. The SDK is built on httpx, which spends about three times aiohttp's client CPU
  per request here; on a machine whose cores the workers and the API share, that CPU
  shows in the SDK flows' figures and is the client's, not the API's.

A run counts as completed when its ``end`` event says ``success`` and the last ``values``
event before it ends with the model's (``ai``) message; an ``error`` event, a stream
without ``end`` or any other status counts as a failure.
"""

from __future__ import annotations

import json
from typing import Any, Protocol
from uuid import uuid4

import aiohttp
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from bench.http_paths import ONE_REQUEST

STREAM_MODE = ["values", "messages-tuple"]


class Counts(Protocol):
    def count(self, name: str) -> None: ...


def sdk_client(url: str, token: str) -> LangGraphClient:
    """The SDK's client as its users create it (its own httpx client and defaults)."""
    return get_client(url=url, api_key=token)


def lg_client(url: str, token: str) -> aiohttp.ClientSession:
    """The bench's aiohttp client (as the ``/v1`` flows'), with the SDK's key header."""
    return aiohttp.ClientSession(
        url,
        headers={"x-api-key": token},
        timeout=aiohttp.ClientTimeout(total=60),
        connector=aiohttp.TCPConnector(limit=200),
    )


def run_body(assistant: str, prompt: str, *, create_thread: bool = False) -> dict[str, Any]:
    """The JSON ``runs.stream`` sends for these arguments (its ``None`` fields left out)."""
    body: dict[str, Any] = {
        "input": {"messages": [{"role": "user", "content": prompt}]},
        "stream_mode": STREAM_MODE,
        "stream_subgraphs": False,
        "stream_resumable": False,
        "assistant_id": assistant,
    }
    if create_thread:
        body["if_not_exists"] = "create"
    return body


def _outcome(end: dict[str, Any] | None, values: dict[str, Any] | None) -> str:
    """``completed``, or what went wrong, from the ``end`` event and the last values."""
    if end is None:
        return "stream-without-end"
    if end.get("status") != "success":
        return f"run-{end.get('status')}"
    messages = (values or {}).get("messages") or [{}]
    return "completed" if messages[-1].get("type") == "ai" else "no-reply"


class SdkPath:
    """The LangGraph dialect through ``langgraph_sdk`` (httpx). ``run``: stateless runs."""

    def __init__(self, client: LangGraphClient, assistant: str, prompt: str, *, run: bool):
        self.client, self.assistant, self.prompt, self.run = client, assistant, prompt, run
        self.name = "sdk-run-stream" if run else "sdk-stream"

    async def session(self) -> str:
        if self.run:
            return ONE_REQUEST
        return str((await self.client.threads.create())["thread_id"])

    async def fresh(self, tally: Counts) -> str:
        """A run on a new thread (created by the run's request); the thread to delete."""
        if self.run:
            await self.task(ONE_REQUEST, tally)
            return ONE_REQUEST
        thread_id = str(uuid4())
        await self._stream(thread_id, tally, if_not_exists="create")
        return thread_id

    async def task(self, session_id: str, tally: Counts) -> None:
        await self._stream(session_id or None, tally)

    async def _stream(self, thread_id: str | None, tally: Counts, **extra: Any) -> None:
        end: dict[str, Any] | None = None
        values: dict[str, Any] | None = None
        given: Any = {"messages": [{"role": "user", "content": self.prompt}]}
        parts = self.client.runs.stream(
            thread_id,  # type: ignore[arg-type]  # None: the stateless route
            self.assistant,
            input=given,
            stream_mode=STREAM_MODE,  # type: ignore[arg-type]
            **extra,
        )
        async for part in parts:
            if part.event == "values":
                values = part.data
            elif part.event == "end":
                end = part.data
            elif part.event == "error":
                tally.count("error-event")
                return
        tally.count(_outcome(end, values))

    async def release(self, session_id: str) -> None:
        if session_id != ONE_REQUEST:
            await self.client.threads.delete(session_id)


class LangGraphHttpPath:
    """The same requests as :class:`SdkPath`, sent and read by the bench's aiohttp client
    (the ``/v1`` flows' client): the API's cost without httpx's. ``client`` sends the key
    as the SDK does, ``x-api-key`` (see :func:`lg_client`)."""

    def __init__(self, client: aiohttp.ClientSession, assistant: str, prompt: str, *, run: bool):
        self.client, self.assistant, self.prompt, self.run = client, assistant, prompt, run
        self.name = "lg-run-stream" if run else "lg-stream"

    async def session(self) -> str:
        if self.run:
            return ONE_REQUEST
        async with self.client.post("/threads", json={}) as reply:
            reply.raise_for_status()
            return str((await reply.json())["thread_id"])

    async def fresh(self, tally: Counts) -> str:
        if self.run:
            await self.task(ONE_REQUEST, tally)
            return ONE_REQUEST
        thread_id = str(uuid4())
        await self._stream(f"/threads/{thread_id}/runs/stream", tally, create_thread=True)
        return thread_id

    async def task(self, session_id: str, tally: Counts) -> None:
        path = f"/threads/{session_id}/runs/stream" if session_id else "/runs/stream"
        await self._stream(path, tally)

    async def _stream(self, path: str, tally: Counts, *, create_thread: bool = False) -> None:
        """Read the events until ``end``, by chunk as the ``/v1`` flows do; only the
        ``end`` event and the last ``values`` event before it are parsed."""
        body = run_body(self.assistant, self.prompt, create_thread=create_thread)
        headers = {"Accept": "text/event-stream"}  # as the SDK asks for a stream
        values = b""
        async with self.client.post(path, json=body, headers=headers) as events:
            events.raise_for_status()
            buffer = b""
            async for chunk in events.content.iter_any():
                buffer += chunk
                *complete, buffer = buffer.replace(b"\r\n", b"\n").split(b"\n\n")
                for event in complete:
                    kind, data = _event(event)
                    if kind == "values":
                        values = data
                    elif kind == "error":
                        tally.count("error-event")
                        return
                    elif kind == "end":
                        tally.count(_outcome(json.loads(data), json.loads(values or b"{}")))
                        return
        tally.count(_outcome(None, None))

    async def release(self, session_id: str) -> None:
        if session_id == ONE_REQUEST:
            return
        async with self.client.delete(f"/threads/{session_id}") as reply:
            reply.raise_for_status()


def _event(event: bytes) -> tuple[str, bytes]:
    """The name and data of one SSE event."""
    kind, data = "", b""
    for line in event.split(b"\n"):
        if line.startswith(b"event:"):
            kind = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data = line[5:]
    return kind, data


BASELINE = {
    "sdk-stream": "harness-stream",
    "sdk-run-stream": "harness-run-stream",
    "lg-stream": "harness-stream",
    "lg-run-stream": "harness-run-stream",
}
"""Each LangGraph-dialect flow's harness flow: the same work in the caller's process."""
CLIENT = {
    "sdk-stream": "langgraph_sdk (httpx)",
    "sdk-run-stream": "langgraph_sdk (httpx)",
    "lg-stream": "the same requests, aiohttp",
    "lg-run-stream": "the same requests, aiohttp",
}
