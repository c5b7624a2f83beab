"""One writer per thread, whatever stalls: fenced checkpoint writes, renewal deadline, hand-back.

Workers run as separate OS processes where the boundary matters. A worker whose own Redis
traffic must be stalled or partitioned talks to Redis through a TCP proxy
(``tests.support.tcp_proxy``); its controlled model keeps its bookkeeping on a direct
connection (``AHP_TEST_MODEL_REDIS_URL``), so the observations never pass the proxy. The fenced
saver at unit level: ``tests/test_fenced_saver.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from datetime import timedelta
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import (
    Completed,
    SessionSpec,
    TaskRequest,
    TextInput,
    TextOutput,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.redis.aio import AsyncRedisSaver

from harness import CeleryHarness
from tooling.worker_process import WorkerProcess
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.controlled_model import MODEL_REDIS_URL_ENV
from .support.keyspace import task_record, terminal_entries
from .support.tcp_proxy import proxy_to
from .support.waiting import until


def _deployment(settings: Settings, **changes: object) -> Settings:
    suffix = uuid4().hex[:6]
    update: dict[str, object] = {
        "namespace": f"{settings.namespace}-fence-{suffix}",
        "queue": f"{settings.queue}.fence.{suffix}",
        "lease_ttl": timedelta(seconds=2),
        "sweep_interval": timedelta(seconds=0.25),
        **changes,
    }
    return settings.model_copy(update=update)


def _request(text: str) -> TaskRequest:
    return TaskRequest(TextInput(text))


def _server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()  # type: ignore[misc]
    return int(seconds) * 1000 + int(micros) // 1000


def _lapses_at_ms(client: redis.Redis, key: str) -> int:
    """When the lease at ``key`` lapses unless renewed (server clock): Redis's own expiry
    of it, its TTL read with the server's time in one transaction."""
    pipe = client.pipeline(transaction=True)
    pipe.time()
    pipe.pttl(key)
    (seconds, micros), remaining = pipe.execute()
    assert remaining > 0, f"no lease with a TTL at {key}: {remaining}"
    return int(seconds) * 1000 + int(micros) // 1000 + int(remaining)


async def _history_texts(redis_url: str, thread_id: str) -> list[list[str]]:
    """The messages of every checkpoint stored for the thread, read by a plain saver."""
    saver = AsyncRedisSaver(redis_url=redis_url)
    await saver.asetup()
    try:
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        return [
            [message.text for message in stored.checkpoint["channel_values"].get("messages", [])]
            async for stored in saver.alist(config)
        ]
    finally:
        await saver.__aexit__(None, None, None)


def _answer(outcome: object) -> str:
    assert isinstance(outcome, Completed), outcome
    assert isinstance(outcome.output, TextOutput)
    return outcome.output.text


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        if worker.pid is not None:
            with _suppress_lookup():
                os.killpg(worker.pid, signal.SIGCONT)
        worker.kill()


class _suppress_lookup:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is ProcessLookupError


async def _start(workers: list[WorkerProcess], worker: WorkerProcess) -> WorkerProcess:
    workers.append(worker)
    await asyncio.to_thread(worker.start)
    return worker


@pytest.mark.processes
async def test_a_paused_holder_cannot_move_the_thread_back_to_its_stale_turn(
    settings: Settings,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
    workers: list[WorkerProcess],
) -> None:
    """The holder's checkpoint write is on its way (held in the network) when the holder
    is paused past the TTL; another worker resumes and completes the task; then the
    write reaches Redis and the holder resumes. The thread keeps only the answer the
    caller saw: in its history, in the latest pointer, in the next task's context."""
    deployment = _deployment(settings)
    keys = Keys(deployment.namespace)
    model_env = {MODEL_REDIS_URL_ENV: settings.redis_url}
    with proxy_to(settings.redis_url) as proxy:
        paused = await _start(
            workers,
            WorkerProcess(
                deployment.model_copy(update={"redis_url": proxy.url}),
                concurrency=1,
                extra_env=model_env,
                name="paused",
            ),
        )
        assert paused.pid is not None
        async with CeleryHarness(deployment, profile="tagged") as harness:
            session = await harness.create_session(SessionSpec())
            thread = keys.thread_id(session.id.value)
            first = await session.start_task(_request("earlier-turn"))
            await asyncio.wait_for(first.await_outcome(), 30)
            boundary.hold()
            task = await session.start_task(_request("contested-turn"))
            await until(lambda: boundary.calls_for(task.id.value), "the first run's model call")
            stale_answer = str(boundary.calls_for(task.id.value)[0]["reply"])
            # The first run's checkpoint write (carrying its answer) stays in the network.
            proxy.freeze_when(stale_answer.encode(), b"channel_values")
            boundary.release()
            await until(proxy.frozen.is_set, "the first run's checkpoint write")
            os.killpg(paused.pid, signal.SIGSTOP)
            try:
                await _start(workers, WorkerProcess(deployment, concurrency=1, name="resumer"))
                answer = _answer(await asyncio.wait_for(task.await_outcome(), 60))
                assert answer != stale_answer
                pointer = sync_redis.get(keys.checkpoint_latest(session.id.value))
                assert pointer
                proxy.thaw()
                await until(proxy.answered.is_set, "Redis executing the held write")
            finally:
                os.killpg(paused.pid, signal.SIGCONT)
            assert sync_redis.get(keys.checkpoint_latest(session.id.value)) == pointer
            follow = await session.start_task(_request("next-turn"))
            await asyncio.wait_for(follow.await_outcome(), 60)
            texts = list(boundary.calls_for(follow.id.value)[0]["texts"])  # type: ignore[call-overload]
            assert stale_answer not in texts
            assert texts.count(answer) == 1
            assert texts.count("contested-turn") == 1
            for messages in await _history_texts(settings.redis_url, thread):
                assert stale_answer not in messages
            assert terminal_entries(sync_redis, deployment.namespace, task.id.value) == 1
            assert boundary.overlaps == 0


class _Monitor:
    """Redis MONITOR in a thread: proves a command carrying given markers was executed."""

    def __init__(self, redis_url: str, *markers: str) -> None:
        self._client = redis.Redis.from_url(redis_url, decode_responses=True)
        self._markers = markers
        self.seen = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        try:
            with self._client.monitor() as monitor:
                while not self._stop.is_set():
                    try:
                        command = str(monitor.next_command().get("command", ""))
                    except Exception:
                        continue
                    if all(marker in command for marker in self._markers):
                        self.seen.set()
        finally:
            self._client.close()

    def close(self) -> None:
        """Stop at the next command Redis executes (the workers issue them all the time)."""
        self._stop.set()


async def test_a_run_that_outlived_its_cancellation_cannot_write_into_the_next_run_of_its_session(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """In one worker process: a run whose model ignores cancellation outlives it; its lease
    lapses, the next task of the session is claimed in the same process, and only then
    does the stale run reach its checkpoint write. It is refused: nothing of the stale
    run lands in the thread."""
    keys = Keys(settings.namespace)
    async with CeleryHarness(settings, profile="ignoring") as harness:
        session = await harness.create_session(SessionSpec())
        first = await session.start_task(_request("earlier-turn"))
        await asyncio.wait_for(first.await_outcome(), 30)
        boundary.hold()
        stale = await session.start_task(_request("stale-input"))
        await until(lambda: boundary.calls_for(stale.id.value), "the stale run's model call")
        await stale.request_cancellation()
        await asyncio.wait_for(stale.await_outcome(), 30)  # settled; its run goes on
        monitor = _Monitor(settings.redis_url, "stale-input", "channel_values")
        try:
            # The stale run's lease lapses (as after a stall), so the session is free again.
            sync_redis.delete(keys.lease(session.id.value))
            fresh = await session.start_task(_request("fresh-input"))
            await until(lambda: boundary.calls_for(fresh.id.value), "the next run's model call")
            boundary.release()
            await asyncio.wait_for(fresh.await_outcome(), 30)
            await until(monitor.seen.is_set, "the stale run's checkpoint write")
        finally:
            monitor.close()
        await until(lambda: boundary.in_flight() == 0, "both model calls to end")
        for messages in await _history_texts(settings.redis_url, session.id.value):
            assert "stale-input" not in messages
        follow = await session.start_task(_request("next-turn"))
        await asyncio.wait_for(follow.await_outcome(), 30)
        texts = list(boundary.calls_for(follow.id.value)[0]["texts"])  # type: ignore[call-overload]
        assert "stale-input" not in texts
        assert texts.count("fresh-input") == 1


@pytest.mark.processes
async def test_a_holder_that_cannot_renew_stops_its_model_call_before_another_run_starts(
    settings: Settings,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
    workers: list[WorkerProcess],
) -> None:
    """The holder's own Redis traffic is partitioned (its model call is not): it cannot
    renew. Another worker takes the task over once the lease lapsed. The model boundary
    never sees two calls of the session at once, and the task ends exactly once."""
    deployment = _deployment(settings)
    model_env = {MODEL_REDIS_URL_ENV: settings.redis_url}
    with proxy_to(settings.redis_url) as proxy:
        try:
            await _start(
                workers,
                WorkerProcess(
                    deployment.model_copy(update={"redis_url": proxy.url}),
                    concurrency=1,
                    extra_env=model_env,
                    name="partitioned",
                ),
            )
            async with CeleryHarness(deployment, profile="confirmed") as harness:
                session = await harness.create_session(SessionSpec())
                boundary.hold()
                task = await session.start_task(_request("partitioned-turn"))
                await until(lambda: boundary.calls_for(task.id.value), "the first model call")
                await _start(workers, WorkerProcess(deployment, concurrency=1, name="taker"))
                proxy.cut()
                await until(
                    lambda: len(boundary.calls_for(task.id.value)) >= 2,
                    "the takeover's model call",
                )
                boundary.release()
                outcome = await asyncio.wait_for(task.await_outcome(), 60)
                assert isinstance(outcome, Completed)
                assert boundary.overlaps == 0
                assert terminal_entries(sync_redis, deployment.namespace, task.id.value) == 1
        finally:
            proxy.heal()


@pytest.mark.processes
async def test_sigterm_hands_the_lease_back_so_the_requeued_copy_runs_at_once(
    settings: Settings,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
    workers: list[WorkerProcess],
) -> None:
    """SIGTERM to a worker's processes (as ``systemctl stop`` sends it) while its run is
    in the model: the run is cancelled, its lease handed back and its message requeued;
    another worker claims the copy after the signal and before the lease could have lapsed
    (its expiry as Redis held it at the signal; renewals only move it later), so the lease
    was handed back, not waited out (server clock). How soon: ``bench/recovery.py``."""
    ttl = timedelta(seconds=6)
    deployment = _deployment(settings, lease_ttl=ttl)
    leaving = await _start(workers, WorkerProcess(deployment, concurrency=1, name="leaving"))
    assert leaving.pid is not None
    async with CeleryHarness(deployment, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        boundary.hold()
        task = await session.start_task(_request("handed-back"))
        await until(lambda: boundary.calls_for(task.id.value), "the first model call")
        await _start(workers, WorkerProcess(deployment, concurrency=1, name="staying"))
        fence = int(task_record(sync_redis, deployment.namespace, task.id.value)[TaskField.FENCE])
        lapses_ms = _lapses_at_ms(sync_redis, Keys(deployment.namespace).lease(session.id.value))
        stopped_ms = _server_ms(sync_redis)
        os.killpg(leaving.pid, signal.SIGTERM)
        await until(
            lambda: (
                int(task_record(sync_redis, deployment.namespace, task.id.value)[TaskField.FENCE])
                > fence
            ),
            "the requeued copy's claim",
        )
        claimed_ms = int(
            task_record(sync_redis, deployment.namespace, task.id.value)[TaskField.CLAIMED_MS]
        )
        assert stopped_ms <= claimed_ms < lapses_ms
        boundary.release()
        assert isinstance(await asyncio.wait_for(task.await_outcome(), 60), Completed)
        assert terminal_entries(sync_redis, deployment.namespace, task.id.value) == 1
        assert boundary.overlaps == 0
