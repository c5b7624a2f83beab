"""Real parts for every test: an embedded Redis 8 and real Celery workers.

Redis is started here on a free port (or taken from ``AHP_TEST_REDIS_URL``); if it cannot
be started the session fails; nothing is skipped. Workers run in-process in a thread
pool for speed; tests that need separate OS processes start them with
``tooling.worker_process.WorkerProcess`` (``tests.support.fault_pool``).

The suite runs on several pytest-xdist processes (``addopts`` in pyproject.toml). Each
is a session of its own: its own embedded Redis, its own in-process workers and worker
processes, so tests of different processes share nothing but the machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import timedelta
from uuid import uuid4

import pytest
import redis
from celery.contrib.testing.worker import start_worker

from tooling.embedded_redis import EmbeddedRedis
from wire.keys import Keys
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.fault_pool import Pool, fault_settings
from .support.machine import MARKER, machine_share, remove_lock_files, run_id

# The developer's own OpenTelemetry environment would make the in-process workers trace
# into their collector (wire.tracing_setup); tests that trace set up their own.
for _name in [name for name in os.environ if name.startswith("OTEL_")]:
    del os.environ[_name]


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """One Redis given by ``AHP_TEST_REDIS_URL`` holds one session's tests: the controlled
    model's bookkeeping is per Redis, not per process. The tests then run in this process
    alone (as with ``-n 0``)."""
    if os.environ.get("AHP_TEST_REDIS_URL") and config.getoption("numprocesses", None):
        config.option.numprocesses = 0


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    # The controller names the run, so it can remove the machine lock's files after it.
    if config.getoption("testrunuid", None) is None:
        config.option.testrunuid = uuid4().hex


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.getoption("testrunuid", None)
    if run is not None and not hasattr(config, "workerinput"):
        remove_lock_files(run)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    """Each test's setup, call and teardown hold the machine lock of the xdist run
    (``tests.support.machine``): shared, or whole for a test marked ``exclusive``."""
    run = run_id()
    if run is None:
        return (yield)
    exclusive = item.get_closest_marker(MARKER) is not None
    with machine_share(run, exclusive=exclusive):
        return (yield)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    external = os.environ.get("AHP_TEST_REDIS_URL")
    if external:
        redis.Redis.from_url(external).ping()
        os.environ["AHP_REDIS_URL"] = external
        yield external
        return
    with EmbeddedRedis() as server:
        os.environ["AHP_REDIS_URL"] = server.url
        yield server.url


@pytest.fixture(scope="session")
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url,
        namespace=f"test-{uuid4().hex[:8]}",
        queue=f"ahp.test.{uuid4().hex[:8]}",
        profiles="tests.support.profiles:PROFILES",
        profile="confirmed",
        lease_ttl=timedelta(seconds=3),
    )


@pytest.fixture(scope="session")
def worker(settings: Settings) -> Iterator[None]:
    from workers.celery_app import create_app

    app = create_app(settings)
    with start_worker(
        app, pool="threads", concurrency=12, perform_ping_check=False, shutdown_timeout=30
    ):
        # The loop (with its sweeper and maintenance consumer) serves from the start, not
        # from the first task: a test that releases a session before any task ran gets
        # its checkpoint thread deleted like any other.
        app.ahp_runtime.start()
        _wait_until_serving(settings)
        yield
    app.ahp_runtime.stop()


def _wait_until_serving(settings: Settings, within: float = 30.0) -> None:
    """Until the worker's maintenance consumer announced itself (keys a starting worker
    writes by itself, a moment after it started): a snapshot of the namespace taken after
    this shows only what its test did, whichever test happens to start the worker."""
    keys = Keys(settings.namespace)
    client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    try:
        deadline = time.monotonic() + within
        while not any(
            client.exists(keys.maintenance_consumer(str(member)))
            for member in client.smembers(keys.maintenance_consumers())  # type: ignore[union-attr]
        ):
            assert time.monotonic() < deadline, "the in-process worker never served"
            time.sleep(0.01)
    finally:
        client.close()


@pytest.fixture(scope="session")
def sync_redis(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def boundary(sync_redis: redis.Redis, worker: None) -> Iterator[ModelBoundary]:
    observation = ModelBoundary(sync_redis)
    yield observation
    observation.settle()


@pytest.fixture
def idle_queue_settings(settings: Settings) -> Settings:
    """The test deployment with a queue of its own that no worker serves: starts stay
    unclaimed."""
    return settings.model_copy(update={"queue": f"{settings.queue}.idle-{uuid4().hex[:6]}"})


@pytest.fixture(scope="session")
def _session_fault_pool(settings: Settings) -> Iterator[Pool]:
    pool = Pool(fault_settings(settings))
    pool.start()
    yield pool
    pool.stop()


@pytest.fixture
def fault_pool(_session_fault_pool: Pool) -> Pool:
    """Two worker processes (threads, two runs each) of a deployment of their own with a
    2 s lease and a 0.25 s sweep, started once per session for the tests that need
    separate OS processes; a test that kills one replaces it (``Pool.replace``), and one
    that failed before it did finds the pool whole again."""
    _session_fault_pool.heal()
    return _session_fault_pool
