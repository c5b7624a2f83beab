"""Flower tells AHP outcomes apart: a worker, a completed, a cancelled and a revoked task.

Flower runs as its own OS process (``celery -A workers.main flower``, basic
authentication from ``FLOWER_BASIC_AUTH``) with a worker OS process (prefork, heartbeats
on), both on a Redis 8 of this test that requires a password, as compose runs them.
What is asserted is read from Flower's HTTP API: ``/api/workers`` (through the workers'
broadcast queue), ``/api/tasks`` (from the workers' task events), ``/metrics``.
"""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar
from uuid import uuid4

import httpx
import pytest
import redis
from agent_harness_protocol import (
    Cancelled,
    Completed,
    SessionSpec,
    TaskRequest,
    TextInput,
)
from prometheus_client.parser import text_string_to_metric_families

from harness import CeleryHarness
from tooling.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from tooling.worker_process import WorkerProcess
from wire.celery_config import RUN_TASK
from wire.codec import outcome_to_json, usage_to_json
from wire.settings import Settings
from workers.guarded_transport import TRANSPORT_ALIAS
from workers.run_summary import summary_from_fields

from .support.boundary import ModelBoundary
from .support.deployments import own_deployment
from .support.flower_process import FlowerProcess
from .support.waiting import wait_for

pytestmark = pytest.mark.processes
T = TypeVar("T")

USER = "operator"
PASSWORD = uuid4().hex
SECRET = f"input-text-{uuid4().hex}"
"""Part of every task's input: it must not appear anywhere Flower shows a task."""


REDIS_PASSWORD = uuid4().hex
"""The deployment's Redis requires it, as in compose: no Flower response may show it."""


@pytest.fixture
def secured_redis() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(EmbeddedRedisConfig(password=REDIS_PASSWORD)) as server:
        yield server


@pytest.fixture
def own_settings(secured_redis: EmbeddedRedis) -> Settings:
    return own_deployment(secured_redis.url, "flower")


@pytest.fixture
def boundary(secured_redis: EmbeddedRedis) -> Iterator[ModelBoundary]:
    """The controlled model of this test's workers, observed in their Redis."""
    client = redis.Redis.from_url(secured_redis.url, decode_responses=True)
    observation = ModelBoundary(client)
    try:
        yield observation
    finally:
        observation.settle()
        client.close()


@pytest.fixture
def flower(own_settings: Settings) -> Iterator[FlowerProcess]:
    with FlowerProcess(own_settings, user=USER, password=PASSWORD) as process:
        yield process


@pytest.fixture
def pool_worker(own_settings: Settings, flower: FlowerProcess) -> Iterator[WorkerProcess]:
    """One prefork child: with one message prefetched per process, a second task stays on
    the queue while the first runs."""
    process = WorkerProcess(own_settings, concurrency=1, pool="prefork", loglevel="info")
    process.start()
    yield process
    process.stop()
    process.log_path.unlink(missing_ok=True)


def _client(flower: FlowerProcess, *, auth: tuple[str, str] | None) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=flower.url, auth=auth, timeout=10)


async def _json(client: httpx.AsyncClient, path: str, **params: str) -> Any:
    response = await client.get(path, params=params)
    assert response.status_code == 200, (path, response.status_code, response.text)
    return response.json()


async def _poll(within: float, probe: Callable[[], Awaitable[T | None]]) -> T:
    """``await probe()`` until it returns something truthy (bounded), and return that."""
    async with asyncio.timeout(within):
        while True:
            value = await probe()
            if value:
                return value
            await asyncio.sleep(0.1)


def _literal(text: object) -> Any:
    """Flower shows arguments and results as the ``repr`` the worker sent."""
    assert isinstance(text, str), text
    return ast.literal_eval(text)


async def test_flower_lists_the_worker_and_tells_completed_cancelled_and_revoked_apart(
    own_settings: Settings,
    flower: FlowerProcess,
    pool_worker: WorkerProcess,
    boundary: ModelBoundary,
) -> None:
    hostname = pool_worker.hostname
    async with _client(flower, auth=flower.auth) as api:
        # Flower's event receiver is connected: it saw our worker's online/heartbeat events.
        await _poll(60, lambda: _alive(api, hostname))

        async with CeleryHarness(
            own_settings, profile="metered", run_metadata=boundary.run_metadata
        ) as harness:
            # A runs (its model call held); B waits on the queue behind it and is cancelled
            # there: the harness settles it and revokes its message.
            boundary.hold()
            first = await harness.create_session(SessionSpec())
            completed = await first.start_task(TaskRequest(TextInput(f"{SECRET} completes")))
            await wait_for(lambda: boundary.calls_for(completed.id.value))
            second = await harness.create_session(SessionSpec())
            revoked = await second.start_task(TaskRequest(TextInput(f"{SECRET} revoked")))
            await revoked.request_cancellation()
            revoked_outcome = await revoked.await_outcome()
            assert isinstance(revoked_outcome, Cancelled)
            # The worker holds the revoke before it can receive B (Flower's inspect of one
            # worker lists its revoked ids).
            await _poll(30, lambda: _revoked_by(api, hostname, revoked.id.value))
            boundary.release()
            completed_outcome = await completed.await_outcome()
            assert isinstance(completed_outcome, Completed)

            # C is cancelled while its model call runs.
            boundary.hold()
            third = await harness.create_session(SessionSpec())
            cancelled = await third.start_task(TaskRequest(TextInput(f"{SECRET} cancelled")))
            await wait_for(lambda: boundary.calls_for(cancelled.id.value))
            await cancelled.request_cancellation()
            cancelled_outcome = await cancelled.await_outcome()
            assert isinstance(cancelled_outcome, Cancelled)
            assert boundary.was_cancelled(cancelled.id.value)
            boundary.release()
            sessions = {
                completed.id.value: first.id.value,
                revoked.id.value: second.id.value,
                cancelled.id.value: third.id.value,
            }

        ids = (completed.id.value, revoked.id.value, cancelled.id.value)
        expected_states = {ids[0]: "SUCCESS", ids[1]: "REVOKED", ids[2]: "SUCCESS"}

        async def settled_in_flower() -> dict[str, Any] | None:
            tasks = await _json(api, "/api/tasks")
            states = {task_id: tasks.get(task_id, {}).get("state") for task_id in ids}
            return tasks if states == expected_states else None

        tasks = await _poll(60, settled_in_flower)

        for task_id in ids:
            shown = tasks[task_id]
            assert shown["worker"] == hostname, shown
            assert SECRET not in json.dumps(shown), shown

        for task_id, outcome in (
            (completed.id.value, completed_outcome),
            (cancelled.id.value, cancelled_outcome),
        ):
            shown = tasks[task_id]
            assert shown["name"] == RUN_TASK, shown
            assert _literal(shown["args"]) == [] or _literal(shown["args"]) == (), shown
            assert _literal(shown["kwargs"]) == {
                "namespace": own_settings.namespace,
                "task_id": task_id,
                "session_id": sessions[task_id],
            }, shown
            # The AHP outcome, as the harness reported it, in the task's result.
            encoded = outcome_to_json(outcome)
            result = _literal(shown["result"])
            assert result["ahp_task_id"] == task_id
            assert result["ahp_outcome"] == encoded["type"], result
            assert result["ahp_state"] == encoded["type"], result
            assert result["usage"] == usage_to_json(outcome.usage), result
        completed_result = _literal(tasks[completed.id.value]["result"])
        assert completed_result["stop_reason"] == completed_outcome.stop_reason.value
        assert completed_result["usage"]["total_tokens"] == 10, completed_result
        assert _literal(tasks[cancelled.id.value]["result"])["ahp_outcome"] == "cancelled"
        # Revoked before any worker received it: never run, no result.
        assert tasks[revoked.id.value]["result"] is None

        # The worker, through the broadcast queue (pidbox) past our guarded transport.
        workers = await _json(api, "/api/workers", refresh="1")
        assert hostname in workers, sorted(workers)
        shown_worker = workers[hostname]
        assert RUN_TASK in shown_worker["registered"], shown_worker
        # Every inspect reply arrived, stats too (its broker info once held a class).
        assert shown_worker["stats"]["pool"]["max-concurrency"] == 1, shown_worker
        assert shown_worker["stats"]["broker"]["transport"] == TRANSPORT_ALIAS, shown_worker
        queues = {queue["name"] for queue in shown_worker["active_queues"]}
        assert own_settings.queue in queues, queues
        # One worker in detail: its configuration too (the broker URL, masked).
        detail = await _json(api, "/api/workers", workername=hostname, refresh="1")
        assert detail[hostname]["conf"]["broker_url"].startswith("redis://:****"), detail
        for shown in (tasks, workers, detail):
            assert REDIS_PASSWORD not in json.dumps(shown)

        # Prometheus text with Flower's task metrics for our worker.
        response = await api.get("/metrics")
        assert response.status_code == 200, response.text
        assert REDIS_PASSWORD not in response.text
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
        }

        def events(kind: str, task: str | None = RUN_TASK) -> float:
            """Events of our worker; ``task=None``: whatever task name Flower knew."""
            return sum(
                value
                for (name, labels), value in samples.items()
                if name == "flower_events_total"
                and dict(labels).get("type") == kind
                and dict(labels).get("worker") == hostname
                and (task is None or dict(labels).get("task") == task)
            )

        assert events("task-succeeded") == 2, response.text
        assert events("task-started") == 2, response.text
        # A revoked message is known by its id only unless a worker had received it.
        assert events("task-revoked", task=None) == 1, response.text
        runtimes = (("task", RUN_TASK), ("worker", hostname))
        assert samples.get(("flower_task_runtime_seconds_count", runtimes)) == 2, response.text

    # Without credentials, or with wrong ones, the API refuses.
    async with _client(flower, auth=None) as anonymous:
        for path in ("/api/tasks", "/api/workers", f"/api/task/info/{ids[0]}"):
            response = await anonymous.get(path)
            assert response.status_code == 401, (path, response.status_code)
            assert SECRET not in response.text
    async with _client(flower, auth=(USER, "wrong")) as intruder:
        assert (await intruder.get("/api/tasks")).status_code == 401


async def _alive(api: httpx.AsyncClient, hostname: str) -> bool:
    status = await _json(api, "/api/workers", status="1")
    return bool(status.get(hostname))


async def _revoked_by(api: httpx.AsyncClient, hostname: str, task_id: str) -> bool:
    response = await api.get("/api/workers", params={"workername": hostname, "refresh": "1"})
    if response.status_code != 200:
        return False
    revoked = response.json().get(hostname, {}).get("revoked") or []
    return task_id in revoked


def test_the_summary_keeps_unknown_unknown_and_user_text_out() -> None:
    assert summary_from_fields("t-1", None, None).to_json() == {
        "ahp_task_id": "t-1",
        "ahp_state": None,
        "ahp_outcome": None,
    }
    assert summary_from_fields("t-1", "running", "").to_json()["ahp_outcome"] is None
    # A stored outcome that does not decode is reported unknown, not guessed.
    assert summary_from_fields("t-1", "failed", "{not json").to_json()["ahp_outcome"] is None
    failed = json.dumps(
        {
            "task_id": "t-1",
            "type": "failed",
            "kind": "unknown",
            "message": f"the model said {SECRET}",
            "output": {"text": SECRET, "complete": False},
            "usage": {"input_tokens": 5},
            "session_usage": None,
        }
    )
    summary = summary_from_fields("t-1", "failed", failed).to_json()
    assert SECRET not in json.dumps(summary)
    assert summary["ahp_outcome"] == "failed"
    assert summary["failure_kind"] == "unknown"
    assert summary["usage"]["input_tokens"] == 5
    assert summary["usage"]["output_tokens"] is None
