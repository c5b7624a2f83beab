"""The HTTP API under test: in-process (ASGI transport) and behind a real uvicorn server.

Both serve the app from ``harness.api.create_app`` over a real ``CeleryHarness`` (real
Redis, real workers); only the chat model is controlled. Tokens here are test secrets.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
import uvicorn
from fastapi import FastAPI

from harness import CeleryHarness
from harness.api import ApiSettings, create_app
from harness.runtime import PublisherFactory
from wire.keys import Keys
from wire.settings import Settings

from .boundary import ModelBoundary

TOKENS = {"alpha": "alpha-token-0123456789abcdef", "beta": "beta-token-0123456789abcdef"}
WEBHOOK_SECRET = "webhook-secret-for-tests"


def api_settings(**overrides: Any) -> ApiSettings:
    values: dict[str, Any] = {"tokens": TOKENS, "webhook_secret": WEBHOOK_SECRET}
    values.update(overrides)
    return ApiSettings(**values)


def auth(tenant: str = "alpha") -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[tenant]}"}


def api_harness(
    settings: Settings,
    boundary: ModelBoundary,
    profile: str = "confirmed",
    publisher_factory: PublisherFactory | None = None,
) -> CeleryHarness:
    return CeleryHarness(
        settings,
        profile=profile,
        run_metadata=boundary.run_metadata,
        publisher_factory=publisher_factory,
    )


@asynccontextmanager
async def in_process(
    harness: CeleryHarness,
    api: ApiSettings | None = None,
    *,
    detach: bool = False,
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app in this event loop. After it the harness is closed (its
    sessions released), or with ``detach`` detached as the app detaches a harness of its
    own when it stops (sessions left open for other replicas). The app is the client's
    ``app`` attribute (``client.app``)."""
    app = create_app(api or api_settings(), harness)
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app), base_url="http://api", timeout=60
            ) as client,
        ):
            client.app = app  # type: ignore[attr-defined]
            yield client
    finally:
        await (harness.detach() if detach else harness.aclose())


@asynccontextmanager
async def owned_app(api: ApiSettings | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app that builds its own harness from the environment (``AHP_*``),
    as ``uvicorn --factory`` runs it, and detaches it when it stops."""
    app = create_app(api or api_settings())
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://api", timeout=60
        ) as client,
    ):
        yield client


def deployment_environment(settings: Settings) -> dict[str, str]:
    """The ``AHP_*`` variables that make ``Settings()`` equal the test deployment's."""
    return {
        "AHP_REDIS_URL": settings.redis_url,
        "AHP_NAMESPACE": settings.namespace,
        "AHP_QUEUE": settings.queue,
        "AHP_PROFILES": settings.profiles,
        "AHP_PROFILE": settings.profile,
        "AHP_LEASE_TTL": str(settings.lease_ttl.total_seconds()),
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True, slots=True)
class LiveServer:
    url: str
    app: FastAPI


@contextmanager
def serve(
    app: Any,
    cleanup: Callable[[], Awaitable[None]] | None = None,
    options: Mapping[str, Any] | None = None,
) -> Iterator[str]:
    """Serve an ASGI app with uvicorn (``options``: more of its settings) on a free port, in
    a thread with its own event loop; ``cleanup`` runs in that loop after the server
    stopped. Yields the base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", **(options or {})
        )
    )
    failure: list[BaseException] = []

    def run() -> None:
        async def main() -> None:
            try:
                await server.serve()
            finally:
                if cleanup is not None:
                    await cleanup()

        try:
            asyncio.run(main())
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run, name="uvicorn", daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError(f"uvicorn did not start: {failure}")
            thread.join(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "uvicorn did not stop"
        assert not failure, failure


@contextmanager
def live_server(harness: CeleryHarness, api: ApiSettings | None = None) -> Iterator[LiveServer]:
    """The app behind a real uvicorn server on a free port, in a thread with its own event
    loop (where the harness opens its clients, and is closed after the server stopped)."""
    settings = api or api_settings()
    app = create_app(settings, harness)
    with serve(app, harness.aclose, settings.uvicorn_options()) as url:
        yield LiveServer(url, app)


ROOT = Path(__file__).resolve().parents[2]
AHP_CELERY = str(Path(sys.executable).with_name("ahp-celery"))


@dataclass(frozen=True, slots=True)
class ApiProcess:
    url: str
    port: int
    process: asyncio.subprocess.Process


@asynccontextmanager
async def api_process(
    settings: Settings, log: Path, environment: Mapping[str, str] | None = None
) -> AsyncIterator[ApiProcess]:
    """``ahp-celery api``, as a deployment runs it, in a process of its own on a free port
    (tenant ``alpha``'s token; ``environment``: more of it), answering ``/healthz``; killed
    on exit unless it ended."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("AHP_")}
    env.update(deployment_environment(settings))
    env["AHP_API_TOKENS"] = json.dumps({"alpha": [TOKENS["alpha"]]})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    env.update(environment or {})
    with log.open("wb") as output:
        process = await asyncio.create_subprocess_exec(
            AHP_CELERY,
            "api",
            "--port",
            str(port),
            env=env,
            cwd=ROOT,
            stdout=output,
            stderr=asyncio.subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        async with asyncio.timeout(30):
            while not await _answers(f"{url}/healthz"):
                if process.returncode is not None:
                    raise RuntimeError(f"ahp-celery api exited ({process.returncode}); see {log}")
                await asyncio.sleep(0.1)
        yield ApiProcess(url, port, process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _answers(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=1) as client:
            return (await client.get(url)).status_code == 200
    except httpx.HTTPError:
        return False


def keyspace(client: redis.Redis, deployment: Settings | None = None) -> dict[str, str]:
    """Every key of the deployment's Redis with a digest of its value: what a refused
    request must leave unchanged. Left out: the controlled model's own keys, the workers'
    maintenance-consumer liveness keys and presence reports (a worker's heartbeat, not a
    request's) and
    kombu's in-flight bookkeeping (``unacked*``: emptied when an earlier run is acked);
    a published run still shows in its task record and the queue lists.

    With ``deployment`` (a namespace and a queue of one test's own), only its keys and
    its queue's lists: what other tests' tasks do meanwhile (settling, expiring) does not
    show."""
    snapshot: dict[str, str] = {}
    if deployment is None:
        names = (key for key in client.scan_iter(count=1000))
    else:
        queues = Keys.broker_queue_lists(deployment.queue)
        names = itertools.chain(
            client.scan_iter(match=f"{deployment.namespace}:*", count=1000), queues
        )
    for key in names:
        name = key if isinstance(key, str) else key.decode()
        if name.startswith(("ahp-test:", "unacked")) or ":maintenance:consumer" in name:
            continue
        if name.endswith(":workers") or ":worker:" in name:
            continue  # the workers' presence reports (``workers.presence``): a heartbeat
        kind = client.type(name)
        if kind == "hash":
            value: Any = client.hgetall(name)
        elif kind == "string":
            value = client.get(name)
        elif kind == "list":
            value = client.lrange(name, 0, -1)
        elif kind == "set":
            value = sorted(client.smembers(name))
        elif kind == "stream":
            value = client.xlen(name)
        elif kind == "none":
            continue  # expired between the scan and the read
        else:
            value = kind
        snapshot[name] = json.dumps(value, sort_keys=True, default=str)
    return snapshot


async def settled_keyspace(client: redis.Redis, deployment: Settings) -> dict[str, str]:
    """:func:`keyspace` once the worker's steps after a run's end (its lease released,
    its checkpoints pruned) are done: two snapshots 0.2 s apart agree."""
    previous = keyspace(client, deployment)
    async with asyncio.timeout(15):
        while True:
            await asyncio.sleep(0.2)
            current = keyspace(client, deployment)
            if current == previous:
                return current
            previous = current


@dataclass
class SseEvent:
    id: str
    event: str
    data: dict[str, Any]


async def read_events(response: httpx.Response, limit: int | None = None) -> list[SseEvent]:
    """Parse an SSE body (``limit``: stop after that many events).

    Stopping early drops the body's line iterator, and its finalizer may close the
    connection at once: a test that stays connected after ``limit`` events keeps its own
    iterator and reads with :func:`next_events`."""
    return await next_events(response.aiter_lines(), limit)


async def post_stream(
    client: httpx.AsyncClient, path: str, body: Mapping[str, Any], tenant: str = "alpha"
) -> list[SseEvent]:
    """POST ``body`` to a streaming route as ``tenant`` and read its events to the end."""
    async with client.stream("POST", path, json=body, headers=auth(tenant)) as response:
        assert response.status_code == 200, (await response.aread()).decode()
        return await read_events(response)


async def next_events(lines: AsyncIterator[str], limit: int | None = None) -> list[SseEvent]:
    """The next events (at most ``limit``) of an SSE body's lines; the iterator stays open."""
    events: list[SseEvent] = []
    fields: dict[str, str] = {}
    async for line in lines:
        if line == "":
            if "data" in fields:
                events.append(
                    SseEvent(
                        fields.get("id", ""), fields.get("event", ""), json.loads(fields["data"])
                    )
                )
                if limit is not None and len(events) >= limit:
                    return events
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        fields[name] = value[1:] if value.startswith(" ") else value
    return events


def problem_of(response: httpx.Response) -> Mapping[str, Any]:
    assert response.headers["content-type"].startswith("application/problem+json"), response.text
    body: Mapping[str, Any] = response.json()
    assert body["status"] == response.status_code
    assert body["type"].startswith("https://")
    assert body["title"]
    assert body["detail"]
    return body
