"""A deployment pointed at a Redis without the Query Engine and JSON is refused, clearly.

langgraph-checkpoint-redis needs both (Redis 8, or Redis Stack). Pointed at a plain Redis
(7.x, or a managed one without modules) a worker used to log a ``RedisSearchError`` from a
signal handler, report ready, take tasks and never settle them, while the caller waited
forever. Now the worker exits non-zero at start and the caller refuses to open a session,
both with one message naming what the server lacks and what to run instead.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import (
    HarnessTransportError,
    PersistenceRequirement,
    PersistentSessionRef,
    SessionRequirements,
    SessionSpec,
    StorageNamespace,
)

from harness import CeleryHarness
from harness.errors import RedisModulesMissingError
from tooling.embedded_redis import find_redis_binaries
from tooling.errors import WorkerProcessError
from tooling.worker_process import WorkerProcess
from wire.provider import PROVIDER
from wire.settings import Settings

WHAT_IT_LACKS = ("Query Engine", "JSON")
WHAT_TO_RUN = ("Redis 8", "Redis Stack", "ahp-celery redis")


@pytest.fixture(scope="module")
def plain_redis_url() -> Iterator[str]:
    """The same redis-server binary as the embedded Redis 8, without its modules."""
    server, _ = find_redis_binaries()
    with tempfile.TemporaryDirectory(prefix="plain-redis-") as data:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        process = subprocess.Popen(
            [str(server), "--port", str(port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", data],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        url = f"redis://127.0.0.1:{port}/0"
        probe = redis.Redis.from_url(url)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    probe.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline or process.poll() is not None:
                        raise
                    time.sleep(0.05)
            loaded = {str(module[b"name"], "utf-8") for module in probe.module_list()}
            assert not loaded & {"search", "ReJSON"}, loaded
            yield url
        finally:
            probe.close()
            process.terminate()
            process.wait(10)


def _plain_settings(settings: Settings, url: str) -> Settings:
    suffix = uuid4().hex[:6]
    return settings.model_copy(
        update={
            "redis_url": url,
            "namespace": f"{settings.namespace}-plain-{suffix}",
            "queue": f"{settings.queue}.plain.{suffix}",
        }
    )


def _says_what_to_do(message: str) -> None:
    for words in (*WHAT_IT_LACKS, *WHAT_TO_RUN):
        assert words in message, message


@pytest.mark.processes
def test_a_worker_refuses_to_start_on_redis_without_the_modules(
    settings: Settings, plain_redis_url: str
) -> None:
    worker = WorkerProcess(
        _plain_settings(settings, plain_redis_url), concurrency=2, name="plain", loglevel="info"
    )
    with pytest.raises(WorkerProcessError, match="exited with code"):
        worker.start()
    assert worker.returncode not in (None, 0)
    log = Path(worker.log_path).read_text()
    lines = [line for line in log.splitlines() if "Query Engine" in line]
    assert len(lines) == 1, log
    _says_what_to_do(lines[0])
    assert "Traceback" not in log, log


async def test_a_caller_refuses_to_open_sessions_on_redis_without_the_modules(
    settings: Settings, plain_redis_url: str
) -> None:
    plain = _plain_settings(settings, plain_redis_url)
    async with CeleryHarness(plain, profile="confirmed") as harness:
        with pytest.raises(HarnessTransportError) as caught:
            await harness.create_session(SessionSpec())
        assert isinstance(caught.value, RedisModulesMissingError)
        _says_what_to_do(str(caught.value))
        spec = SessionSpec(requirements=SessionRequirements(persistence=PersistenceRequirement()))
        reference = PersistentSessionRef(PROVIDER, StorageNamespace(plain.namespace), "a-context")
        with pytest.raises(RedisModulesMissingError) as reopened:
            await harness.reopen_session(reference, spec)
        assert str(reopened.value) == str(caught.value)
    # Nothing was written for the refused sessions.
    client = redis.Redis.from_url(plain_redis_url)
    try:
        assert not client.keys(f"{plain.namespace}:*")
    finally:
        client.close()
