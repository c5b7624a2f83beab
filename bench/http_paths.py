"""The ``/v1`` flows of ``bench/http_vs_harness.py`` and the harness flows they are
compared with: the harness in the caller's process, the HTTP API through aiohttp, and
one request's floor (``GET /healthz``)."""

from __future__ import annotations

import json

import aiohttp
from agent_harness_protocol import (
    Completed,
    SessionSpec,
    TaskRequest,
    TerminalEvent,
    TextInput,
)

from bench.http_rig import Tally
from harness import CeleryHarness, CelerySession

TENANT = "bench"
PROMPT = "what does the bench measure?"
ONE_REQUEST = ""
"""The "session" of a one-request flow: each task creates its own."""


class HarnessPath:
    """The harness in this process. ``single_task``: every task in a session of its own
    that ends with it (what the API's one-request runs do). ``stream``: the caller follows
    every event of the task (``task.events()`` to the terminal one) before its outcome,
    as an HTTP client of a streaming route receives them all; else it only awaits the
    outcome, as a waiting route does."""

    def __init__(
        self, harness: CeleryHarness, *, single_task: bool = False, stream: bool = False
    ) -> None:
        self.harness = harness
        self.single_task = single_task
        self.stream = stream
        self.name = ("harness-run" if single_task else "harness") + ("-stream" if stream else "")
        self._sessions: dict[str, CelerySession] = {}

    async def session(self) -> str:
        if self.single_task:
            return ONE_REQUEST
        session = await self.harness.create_session(SessionSpec(), tenant=TENANT)
        self._sessions[session.id.value] = session
        return session.id.value

    async def task(self, session_id: str, tally: Tally) -> None:
        if self.single_task:
            session = await self.harness.create_session(
                SessionSpec(), tenant=TENANT, single_task=True
            )
        else:
            session = self._sessions[session_id]
        task = await session.start_task(TaskRequest(TextInput(PROMPT)))
        if self.stream:
            terminal = None
            async for event in task.events():
                terminal = event
            if not isinstance(terminal, TerminalEvent):
                tally.count("stream-without-terminal")
                return
        outcome = await task.await_outcome()
        ok = isinstance(outcome, Completed) and outcome.output is not None
        tally.count("completed" if ok else type(outcome).__name__.lower())

    async def fresh(self, tally: Tally) -> str:
        """A task in a fresh session; the session to release after it."""
        session_id = await self.session()
        await self.task(session_id, tally)
        return session_id

    async def release(self, session_id: str) -> None:
        if session_id != ONE_REQUEST:
            await self._sessions.pop(session_id).release()


class HttpPath:
    """The HTTP flow with aiohttp: its client spends about 0.4 ms per request here, httpx's
    about 1.2 ms (GET /healthz, one keep-alive connection; a raw socket: 0.3 ms), and the
    client's cost is not the API's. ``run``: one request creates the session and runs the
    task (``POST /v1/tasks``), and the session ends with it. Else the session stays for
    more tasks: a fresh one and its first task in one request (``POST /v1/tasks`` with
    ``on_completion: keep``), or with ``two_requests`` created by ``POST /v1/sessions``
    first; sessions created ahead (the throughput chains) by ``POST /v1/sessions``."""

    def __init__(
        self,
        client: aiohttp.ClientSession,
        *,
        stream: bool,
        run: bool = False,
        two_requests: bool = False,
    ) -> None:
        self.client = client
        self.stream = stream
        self.run = run
        self.two_requests = two_requests
        self.name = (
            ("http-run-" if run else "http-")
            + ("stream" if stream else "wait")
            + ("-2req" if two_requests else "")
        )

    async def fresh(self, tally: Tally) -> str:
        """A task in a fresh session; the session to release after it."""
        if self.run or self.two_requests:
            session_id = await self.session()
            await self.task(session_id, tally)
            return session_id
        session_id = await self._task("/v1/tasks", tally, {"on_completion": "keep"})
        if not session_id:
            raise RuntimeError("the run that keeps its session did not name it")
        return session_id

    async def session(self) -> str:
        if self.run:
            return ONE_REQUEST
        async with self.client.post("/v1/sessions", json={}) as reply:
            reply.raise_for_status()
            return str((await reply.json())["id"])

    async def task(self, session_id: str, tally: Tally) -> None:
        path = "/v1/tasks" if self.run else f"/v1/sessions/{session_id}/tasks"
        await self._task(path, tally)

    async def _task(self, path: str, tally: Tally, extra: dict[str, str] | None = None) -> str:
        """One task; the id of its session."""
        body = {"input": PROMPT, **(extra or {})}
        if self.stream:
            # Start the task and read its events in the same response.
            session_id, outcome = await self._stream(f"{path}/stream", body)
        else:
            # Start the task and answer with its outcome in the same response.
            async with self.client.post(path, json=body, params={"wait": "30"}) as reply:
                reply.raise_for_status()
                answer = await reply.json()
                session_id, outcome = str(answer.get("session_id", "")), answer.get("outcome")
        ok = isinstance(outcome, dict) and outcome.get("type") == "completed"
        tally.count("completed" if ok else str((outcome or {}).get("type", "none")))
        return session_id

    async def _stream(
        self, path: str, body: dict[str, str]
    ) -> tuple[str, dict[str, object] | None]:
        """Read the response's events until the terminal one: the session id of the
        ``task_created`` event and the terminal one's outcome; only those two are parsed.
        Reading by chunk, not by line: aiohttp's line iterator cost this client more CPU
        per task than the API spent sending the events."""
        session_id = ""
        async with self.client.post(path, json=body) as events:
            events.raise_for_status()
            buffer = b""
            async for chunk in events.content.iter_any():
                buffer += chunk
                *complete, buffer = buffer.replace(b"\r\n", b"\n").split(b"\n\n")
                for event in complete:
                    if not session_id:
                        session_id = _created_session(event)
                    outcome = _terminal_outcome(event)
                    if outcome is not None:
                        return session_id, outcome
        return session_id, None

    async def release(self, session_id: str) -> None:
        if session_id == ONE_REQUEST:
            return  # its session ended with its task
        async with self.client.delete(f"/v1/sessions/{session_id}") as reply:
            reply.raise_for_status()


class RoundTripPath:
    """One ``GET /healthz``: what a single HTTP request costs here, with no harness work
    behind it (the API's floor per request). Latency scenario only."""

    name = "http-round-trip"

    def __init__(self, client: aiohttp.ClientSession) -> None:
        self.client = client

    async def session(self) -> str:
        return ONE_REQUEST

    async def fresh(self, tally: Tally) -> str:
        await self.task(ONE_REQUEST, tally)
        return ONE_REQUEST

    async def task(self, session_id: str, tally: Tally) -> None:
        async with self.client.get("/healthz") as reply:
            await reply.read()
            tally.count("completed" if reply.status == 200 else f"http-{reply.status}")

    async def release(self, session_id: str) -> None:
        return None


TERMINAL_EVENTS = {"task_completed", "task_failed", "task_cancelled", "task_unresolved"}


def _event(event: bytes) -> tuple[str, str]:
    """The name and data of one SSE event."""
    kind, data = "", ""
    for line in event.decode().split("\n"):
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:]
    return kind, data


def _terminal_outcome(event: bytes) -> dict[str, object] | None:
    """The outcome of one SSE event if it is a terminal one (``{}`` if it has none)."""
    kind, data = _event(event)
    if kind not in TERMINAL_EVENTS:
        return None
    outcome = json.loads(data).get("outcome")
    return outcome if isinstance(outcome, dict) else {}


def _created_session(event: bytes) -> str:
    """The session id of a ``task_created`` event (else empty)."""
    kind, data = _event(event)
    return str(json.loads(data).get("session_id", "")) if kind == "task_created" else ""
