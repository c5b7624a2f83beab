"""Completion webhooks: signed, retried, sent once per task, only to allow-listed hosts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from uuid import uuid4

import redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from harness.api.webhooks import verify
from wire.settings import Settings

from .support.api import (
    WEBHOOK_SECRET,
    api_harness,
    api_settings,
    auth,
    in_process,
    keyspace,
    problem_of,
    serve,
)
from .support.boundary import ModelBoundary
from .support.waiting import wait_for


@dataclass
class Receiver:
    """A webhook receiver that fails its first ``failures`` deliveries with 503."""

    failures: int = 1
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    async def hook(self, request: Request) -> Response:
        self.received.append((dict(request.headers), await request.body()))
        return Response(status_code=503 if len(self.received) <= self.failures else 204)


@contextmanager
def receiver() -> Iterator[tuple[Receiver, str]]:
    state = Receiver()
    app = Starlette(routes=[Route("/hook", state.hook, methods=["POST"])])
    with serve(app) as url:
        yield state, f"{url}/hook"


def _webhooks() -> dict[str, object]:
    return {
        "webhook_hosts": ("127.0.0.1",),
        "webhook_allow_http": True,
        "webhook_first_delay": timedelta(milliseconds=20),
    }


async def test_a_settled_task_is_posted_signed_and_retried_until_accepted(
    settings: Settings, boundary: ModelBoundary
) -> None:
    with receiver() as (state, url):
        async with in_process(api_harness(settings, boundary), api_settings(**_webhooks())) as c:
            session_id = (await c.post("/v1/sessions", json={}, headers=auth())).json()["id"]
            headers = {**auth(), "Idempotency-Key": "hooked"}
            body = {"input": "call me back", "webhook": {"url": url}}
            task = (
                await c.post(f"/v1/sessions/{session_id}/tasks", json=body, headers=headers)
            ).json()
            # A replay of the creation does not register a second webhook.
            replay = await c.post(f"/v1/sessions/{session_id}/tasks", json=body, headers=headers)
            assert replay.status_code == 200
            await wait_for(lambda: len(state.received) >= 2)
            final = (await c.get(f"/v1/tasks/{task['id']}", headers=auth())).json()
    assert len(state.received) == 2  # one refusal (503), then accepted
    first, second = state.received
    for headers_seen, payload in state.received:
        assert headers_seen["webhook-id"] == task["id"]
        assert verify(WEBHOOK_SECRET.encode(), headers_seen["webhook-signature"], payload)
        assert not verify(b"another secret", headers_seen["webhook-signature"], payload)
    assert first[1] == second[1]
    delivered = json.loads(second[1])
    assert delivered["type"] == "task.settled"
    assert delivered["task"]["state"] == "completed"
    assert delivered["task"]["outcome"] == final["outcome"]


async def test_a_webhook_to_a_host_not_allowed_is_refused_before_anything_starts(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    # A namespace and a queue of its own: the snapshot shows what these requests wrote,
    # not what the session's earlier tasks do meanwhile (settle, expire).
    suffix = uuid4().hex[:8]
    own = settings.model_copy(
        update={"namespace": f"{settings.namespace}-hooks-{suffix}", "queue": f"hooks.{suffix}"}
    )
    async with in_process(api_harness(own, boundary), api_settings(**_webhooks())) as c:
        session_id = (await c.post("/v1/sessions", json={}, headers=auth())).json()["id"]
        before = keyspace(sync_redis, own)
        assert any(key.startswith(f"{own.namespace}:") for key in before), before
        for url in (
            "http://example.com/hook",
            "http://127.0.0.2/hook",
            "http://user:pw@127.0.0.1/hook",
            "ftp://127.0.0.1/hook",
            "not a url",
        ):
            refused = await c.post(
                f"/v1/sessions/{session_id}/tasks",
                json={"input": "x", "webhook": {"url": url}},
                headers=auth(),
            )
            assert refused.status_code == 422, (url, refused.text)
            assert problem_of(refused)["issues"][0]["path"] == "body.webhook.url"
        assert keyspace(sync_redis, own) == before
        assert boundary.calls() == []
