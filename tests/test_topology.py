"""The compose topology as local processes, driven over HTTP only.

The same services as ``compose.yaml``, started through the same ``ahp-celery``
commands: a Redis 8 with a password and ``noeviction`` (embedded), the API, two worker
processes and Flower with basic auth. The test talks to them over HTTP alone: it creates
sessions, runs tasks on both workers, follows one over SSE, cancels one, reads the API's
Prometheus metrics and Flower's view of the pool. What the model received is read where
it ran (the controlled model's records in Redis), never from the API's answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
import redis

from tooling.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig

from .support.boundary import ModelBoundary
from .support.controlled_model import MODEL_REDIS_URL_ENV
from .support.ports import free_port
from .support.waiting import until_sync

pytestmark = pytest.mark.processes

TOKEN = "topology-" + uuid4().hex
TENANT = "topology"
FLOWER_USER, FLOWER_PASSWORD = "operator", "flower-" + uuid4().hex[:12]
AHP_CELERY = str(Path(sys.executable).with_name("ahp-celery"))
ROOT = Path(__file__).resolve().parents[1]


class Service:
    """One ``ahp-celery`` command as a process in its own group, logging to a file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.log = logs / f"{name}.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [AHP_CELERY, *args],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def check(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(
                f"{self.name} exited {self.process.returncode}:\n{self.log.read_text()[-3000:]}"
            )

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # prefork children left behind


def _wait_http(url: str, service: Service, auth: httpx.Auth | None = None) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        service.check()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, auth=auth, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise AssertionError(f"{service.name} did not answer {url}:\n{service.log.read_text()}")


class Topology:
    def __init__(self, tmp: Path) -> None:
        self.redis = EmbeddedRedis(
            EmbeddedRedisConfig(password="pw-" + uuid4().hex[:16], appendonly=True)
        )
        self.redis.start()
        self.namespace = f"topo-{uuid4().hex[:8]}"
        self.api_port, self.flower_port = free_port(), free_port()
        env = {key: value for key, value in os.environ.items() if not key.startswith("AHP_")}
        env.update(
            {
                "REDIS_URL": self.redis.url,
                "AHP_NAMESPACE": self.namespace,
                "AHP_QUEUE": f"ahp.topology.{uuid4().hex[:8]}",
                "AHP_PROFILES": "tests.support.profiles:PROFILES",
                "AHP_PROFILE": "confirmed",
                "AHP_LEASE_TTL": "3",
                "AHP_API_TOKENS": json.dumps({TENANT: [TOKEN]}),
                MODEL_REDIS_URL_ENV: self.redis.url,
                "FLOWER_BASIC_AUTH": f"{FLOWER_USER}:{FLOWER_PASSWORD}",
                # The test profiles (the controlled model) live in this repository.
                "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH")))),
            }
        )
        self.services: list[Service] = []
        try:
            for index in (1, 2):
                self.services.append(
                    Service(
                        f"worker{index}",
                        ["worker", "-c", "2", "-l", "warning", "-n", f"worker{index}@%h"],
                        env,
                        tmp,
                    )
                )
            self.api = Service(
                "api", ["api", "--port", str(self.api_port), "--log-level", "warning"], env, tmp
            )
            self.flower = Service("flower", ["flower", "--port", str(self.flower_port)], env, tmp)
            self.services += [self.api, self.flower]
            _wait_http(f"{self.api_url}/healthz", self.api)
            _wait_http(f"{self.flower_url}/healthcheck", self.flower, self.flower_auth)
        except BaseException:
            self.stop()
            raise

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def flower_url(self) -> str:
        return f"http://127.0.0.1:{self.flower_port}"

    @property
    def flower_auth(self) -> httpx.Auth:
        return httpx.BasicAuth(FLOWER_USER, FLOWER_PASSWORD)

    def stop(self) -> None:
        for service in reversed(self.services):
            service.stop()
        self.redis.stop()


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    deployment = Topology(tmp_path_factory.mktemp("topology"))
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture
def model(topology: Topology) -> Iterator[ModelBoundary]:
    client = redis.Redis.from_url(topology.redis.url, decode_responses=True)
    boundary = ModelBoundary(client)
    try:
        yield boundary
    finally:
        boundary.settle()
        client.close()


def _sse(client: httpx.Client, task_id: str) -> list[tuple[str, dict[str, object]]]:
    events: list[tuple[str, dict[str, object]]] = []
    with client.stream("GET", f"/v1/tasks/{task_id}/events") as reply:
        assert reply.status_code == 200
        name = ""
        for line in reply.iter_lines():
            if line.startswith("event:"):
                name = line.partition(":")[2].strip()
            elif line.startswith("data:"):
                events.append((name, json.loads(line.partition(":")[2])))
    return events


def test_the_compose_topology_serves_tasks_over_http_across_two_workers(
    topology: Topology, model: ModelBoundary
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=topology.api_url, headers=headers, timeout=60) as api:
        assert api.get("/v1/sessions/" + "0" * 32).status_code == 404
        assert httpx.get(f"{topology.api_url}/v1/sessions/x", timeout=5).status_code == 401
        # Eight sessions at once, one task each. Each worker process takes one message at
        # a time (prefetch 1, late ack): with the model held, four calls run at once, two
        # per worker, so both workers take work.
        model.hold()
        sessions = [api.post("/v1/sessions", json={}).json()["id"] for _ in range(8)]
        started = [
            api.post(f"/v1/sessions/{sid}/tasks", json={"input": f"topology {n}"}).json()
            for n, sid in enumerate(sessions)
        ]
        until_sync(lambda: model.in_flight() == 4)
        model.release()
        streamed = _sse(api, started[0]["id"])
        assert streamed[0][0] == "task_started"
        assert streamed[-1][0] == "task_completed"
        for task in started:
            final = api.get(f"/v1/tasks/{task['id']}", params={"wait": 30}).json()
            assert final["state"] == "completed", final
            assert final["outcome"]["type"] == "completed"
        # A held task is cancelled over HTTP; the model saw the cancellation.
        model.hold()
        held = api.post(f"/v1/sessions/{sessions[0]}/tasks", json={"input": "hold me"}).json()
        until_sync(lambda: model.in_flight() == 1)
        assert api.post(f"/v1/tasks/{held['id']}/cancel").status_code == 202
        cancelled = api.get(f"/v1/tasks/{held['id']}", params={"wait": 30}).json()
        assert cancelled["outcome"]["type"] == "cancelled"
        assert model.was_cancelled(held["id"])
        model.release()
        inputs = sorted(str(call["texts"][-1]) for call in model.calls())  # type: ignore[index]
        assert inputs == sorted([*(f"topology {n}" for n in range(8)), "hold me"])
        metrics = httpx.get(f"{topology.api_url}/metrics", headers=headers, timeout=10).text
        assert 'ahp_tasks_settled_total{outcome="completed"}' in metrics
        assert 'ahp_tasks_settled_total{outcome="cancelled"}' in metrics
        for sid in sessions:
            assert api.delete(f"/v1/sessions/{sid}").status_code in {200, 204}
    # Flower sees both workers, and the AHP outcome of each run.
    flower = httpx.Client(base_url=topology.flower_url, auth=topology.flower_auth, timeout=30)
    with flower:
        assert httpx.get(f"{topology.flower_url}/api/workers", timeout=10).status_code == 401
        workers = flower.get("/api/workers", params={"refresh": "true"}).json()
        assert {name.split("@")[0] for name in workers} >= {"worker1", "worker2"}
        tasks = flower.get("/api/tasks").json()
        results = {task_id: str(task.get("result")) for task_id, task in tasks.items()}
        assert "cancelled" in results.get(held["id"], "")
        assert "completed" in results.get(started[1]["id"], "")
        hosts = {str(task.get("worker", "")).split("@")[0] for task in tasks.values()}
        assert hosts >= {"worker1", "worker2"}
