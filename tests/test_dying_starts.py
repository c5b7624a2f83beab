"""A start whose caller died between recording it and publishing it never hangs its session.

The start is recorded first (``start_task.lua``: the task is ``starting``, the session's
active task) and published after. A caller killed in between leaves a record whose
message never reached the broker. The rules:

- an idempotent retry (the same ``Idempotency-Key``) that finds it publishes it, once;
- without one, the sweeper settles it ``Failed`` once ``AHP_UNPUBLISHED_START_TIMEOUT``
  has passed (it never ran), and the session takes tasks again.

The API tests kill ``ahp-celery api`` (an OS process) with SIGKILL: once while its publish
cannot complete (its broker accepts the connection and never answers: the kill lands
between the record and the publish every time), and once at each of several delays after
the request left, against the real broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
import redis
from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput
from redis.asyncio import Redis as AsyncRedis

from harness import CeleryHarness
from tooling.worker_process import WorkerProcess
from wire.keys import Keys
from wire.records import SessionField, TaskField
from wire.settings import Settings
from wire.store import RecordStore, StartResult

from .support.api import api_process, auth
from .support.boundary import ModelBoundary
from .support.deployments import own_deployment
from .support.waiting import wait_for

pytestmark = pytest.mark.processes

KILL_DELAYS_MS = (0, 1, 2, 3, 5, 8, 12, 20)


@contextlib.asynccontextmanager
async def _silent_broker() -> AsyncIterator[str]:
    """A TCP server that accepts connections and never answers: a publish to it hangs."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        for writer in held:
            writer.close()
        server.close()


def _published_anywhere(client: redis.Redis, settings: Settings, task_id: str) -> bool:
    lists = Keys.broker_queue_lists(settings.queue)
    return any(task_id in item for name in lists for item in client.lrange(name, 0, -1))


async def _outcome(client: httpx.AsyncClient, base: str, task_id: str) -> dict[str, object]:
    async with asyncio.timeout(60):
        while True:
            response = await client.get(
                f"{base}/v1/tasks/{task_id}", params={"wait": 10}, headers=auth()
            )
            assert response.status_code == 200, response.text
            body: dict[str, object] = response.json()
            if body.get("outcome") is not None:
                return body


async def _start(
    client: httpx.AsyncClient, base: str, session_id: str, key: str, text: str
) -> httpx.Response:
    return await client.post(
        f"{base}/v1/sessions/{session_id}/tasks",
        json={"input": text},
        headers={**auth(), "Idempotency-Key": key},
    )


async def test_a_retry_with_its_key_publishes_a_start_whose_api_died_before_publishing(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    keys = Keys(settings.namespace)
    key = f"dying-{uuid4().hex}"
    async with httpx.AsyncClient(timeout=30) as client:
        async with (
            _silent_broker() as silent,
            api_process(settings, tmp_path / "dying.log", {"AHP_BROKER_URL": silent}) as dying,
        ):
            created = await client.post(f"{dying.url}/v1/sessions", json={}, headers=auth())
            assert created.status_code == 201, created.text
            session_id = str(created.json()["id"])
            request = asyncio.ensure_future(
                _start(client, dying.url, session_id, key, "published by the retry")
            )
            await wait_for(
                lambda: sync_redis.hget(keys.session(session_id), SessionField.ACTIVE),
                within=15,
            )
            task_id = str(sync_redis.hget(keys.session(session_id), SessionField.ACTIVE))
            dying.process.kill()  # recorded, its publish hanging: the window, every time
            await dying.process.wait()
            with pytest.raises(httpx.HTTPError):
                await request
        record = sync_redis.hgetall(keys.task(task_id))
        assert record[TaskField.STATE] == "starting", record
        assert record[TaskField.PUBLISHED] == "0", record
        assert not _published_anywhere(sync_redis, settings, task_id)
        async with api_process(settings, tmp_path / "restarted.log") as restarted:
            retried = await _start(client, restarted.url, session_id, key, "published by the retry")
            assert retried.status_code == 200, retried.text
            assert retried.json()["id"] == task_id
            assert retried.json()["replayed"] is True
            body = await _outcome(client, restarted.url, task_id)
            assert body["state"] == "completed", body
            # Another retry replays it and publishes nothing more.
            again = await _start(client, restarted.url, session_id, key, "published by the retry")
            assert again.status_code == 200, again.text
            assert again.json()["id"] == task_id
            following = await _start(
                client, restarted.url, session_id, f"next-{uuid4().hex}", "the next task"
            )
            assert following.status_code == 201, following.text
            body = await _outcome(client, restarted.url, str(following.json()["id"]))
            assert body["state"] == "completed", body
    assert len(boundary.calls_for(task_id)) == 1


async def test_an_api_killed_at_any_point_of_an_idempotent_start_leaves_no_session_hanging(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    keys = Keys(settings.namespace)
    in_the_window = 0
    async with httpx.AsyncClient(timeout=30) as client:
        for delay_ms in KILL_DELAYS_MS:
            key = f"killed-{delay_ms}-{uuid4().hex}"
            text = f"killed after {delay_ms} ms"
            async with api_process(settings, tmp_path / f"kill-{delay_ms}.log") as dying:
                created = await client.post(f"{dying.url}/v1/sessions", json={}, headers=auth())
                assert created.status_code == 201, created.text
                session_id = str(created.json()["id"])
                request = asyncio.ensure_future(_start(client, dying.url, session_id, key, text))
                await asyncio.sleep(delay_ms / 1000)
                dying.process.kill()
                await dying.process.wait()
                with contextlib.suppress(httpx.HTTPError):
                    await request
            active = sync_redis.hget(keys.session(session_id), SessionField.ACTIVE)
            if active:
                record = sync_redis.hgetall(keys.task(active))
                if record.get(TaskField.PUBLISHED) == "0" and not _published_anywhere(
                    sync_redis, settings, active
                ):
                    in_the_window += 1
            async with api_process(settings, tmp_path / f"retry-{delay_ms}.log") as restarted:
                retried = await _start(client, restarted.url, session_id, key, text)
                assert retried.status_code in {200, 201}, (delay_ms, retried.text)
                task_id = str(retried.json()["id"])
                body = await _outcome(client, restarted.url, task_id)
                assert body["state"] == "completed", (delay_ms, body)
                following = await _start(
                    client, restarted.url, session_id, f"next-{uuid4().hex}", "next"
                )
                assert following.status_code == 201, (delay_ms, following.text)
            assert len(boundary.calls_for(task_id)) == 1, delay_ms
    print(f"kills between the record and the publish: {in_the_window} of {len(KILL_DELAYS_MS)}")


async def test_a_start_never_published_is_settled_failed_after_the_bound_freeing_its_session(
    redis_url: str, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """A Python caller that died between the record and the publish, without a key."""
    own = own_deployment(
        redis_url,
        "unpublished",
        lease_ttl=timedelta(seconds=3),
        sweep_interval=timedelta(seconds=0.25),
        unpublished_start_timeout=timedelta(seconds=4),
    )
    keys = Keys(own.namespace)
    client = AsyncRedis.from_url(own.redis_url, decode_responses=True)
    store = RecordStore(client, keys)
    try:
        with WorkerProcess(own, concurrency=2, name="unpublished"):
            async with CeleryHarness(own, run_metadata=boundary.run_metadata) as harness:
                session = await harness.create_session(SessionSpec())
                ghost = uuid4().hex
                result, _ = await store.start_task(
                    session.id.value,
                    ghost,
                    json.dumps({"text": "never published"}),
                    queue=own.queue,
                )
                assert result is StartResult.OK
                await asyncio.sleep(2)
                assert sync_redis.hget(keys.task(ghost), TaskField.STATE) == "starting"
                await wait_for(
                    lambda: sync_redis.hget(keys.task(ghost), TaskField.STATE) == "failed",
                    within=30,
                )
                outcome = json.loads(str(sync_redis.hget(keys.task(ghost), TaskField.OUTCOME)))
                assert outcome["type"] == "failed", outcome
                assert outcome["kind"] == "transport", outcome
                assert "never ran" in outcome["message"], outcome
                assert outcome["usage"]["total_tokens"] == 0, outcome
                following = await session.start_task(TaskRequest(TextInput("after the ghost")))
                async with asyncio.timeout(30):
                    assert isinstance(await following.await_outcome(), Completed)
        assert not boundary.calls_for(ghost)
    finally:
        await client.aclose()
