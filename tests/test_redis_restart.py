"""Redis restarts with append-only persistence while tasks run and wait.

A Redis of its own (AOF, ``appendfsync always``) and two ``celery worker`` processes
(two prefork children each: four slots). Seven sessions start one task each: one task
streams deltas through the outage, three hold in the model, three wait in the queue.
Redis shuts down gracefully, stays down, and starts again on the same port and data dir.
Then every task must complete exactly once, every ``events()`` subscription must have
received every stream entry exactly once and in order (no ``ObservationGap``), and no
session may ever have had two model calls at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import timedelta

import pytest
import redis
from agent_harness_protocol import (
    AgentTask,
    Completed,
    MessageDelta,
    ObservationGap,
    SessionSpec,
    TaskEvent,
    TaskId,
    TaskRequest,
    TerminalEvent,
    TextInput,
)

from harness import CeleryHarness
from harness.task import remote_cause
from tooling.embedded_redis import EmbeddedRedis
from tooling.worker_process import WorkerProcess
from wire.event_codec import DIAGNOSTIC, event_from_entry
from wire.keys import Keys
from wire.records import TaskField
from wire.redis_options import pool_options
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.deployments import append_only_redis, own_deployment
from .support.waiting import wait_for

pytestmark = pytest.mark.processes

SLOTS = 4  # two worker processes, two runs each
HELD_SESSIONS = 6  # with the streaming one: three run (held), three wait in the queue
DOWN_SECONDS = 2.0
STREAM_CHUNKS = 40  # the "streaming" profile: 40 chunks 50 ms apart, then the reply


@pytest.fixture(scope="module")
def aof_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    with append_only_redis(tmp_path_factory.mktemp("aof-redis")) as server:
        yield server


@pytest.fixture(scope="module")
def restart_settings(aof_redis: EmbeddedRedis) -> Settings:
    return own_deployment(
        aof_redis.url,
        "restart",
        # Renewed every 2.5 s: an outage of a few seconds cannot let a lease lapse, so a
        # run that survives it is the same run (one model call per task), not a rerun.
        lease_ttl=timedelta(seconds=15),
    )


@pytest.fixture(scope="module")
def restart_workers(restart_settings: Settings) -> Iterator[Sequence[WorkerProcess]]:
    # The workers' controlled model finds Redis through AHP_REDIS_URL, which
    # WorkerProcess sets from the settings: it records into this module's Redis.
    with (
        WorkerProcess(restart_settings, concurrency=2, name="restart-a") as first,
        WorkerProcess(restart_settings, concurrency=2, name="restart-b") as second,
    ):
        yield first, second


class _Subscription:
    """One ``events()`` subscription, opened at once and drained in the background."""

    def __init__(self, task: AgentTask) -> None:
        self.task = task
        self.received: list[TaskEvent] = []
        events = task.events()  # registered now, before the reader applies any entry

        async def drain() -> None:
            async for event in events:
                self.received.append(event)

        self.done = asyncio.ensure_future(drain())

    def deltas(self) -> list[str]:
        return [event.text for event in self.received if isinstance(event, MessageDelta)]


def _stored_events(client: redis.Redis, keys: Keys, task_id: str) -> list[TaskEvent]:
    entries = client.xrange(keys.events(task_id))
    return [
        event_from_entry(TaskId(task_id), fields["t"], fields["d"], remote_cause)
        for _, fields in entries  # type: ignore[union-attr]
        if fields["k"] != DIAGNOSTIC
    ]


def _logs(workers: Sequence[WorkerProcess]) -> str:
    return "\n".join(f"--- {w.hostname}:\n{w.log_tail(40)}" for w in workers)


async def test_redis_restart_keeps_queued_and_running_tasks_and_loses_no_event(
    aof_redis: EmbeddedRedis,
    restart_settings: Settings,
    restart_workers: Sequence[WorkerProcess],
) -> None:
    keys = Keys(restart_settings.namespace)
    client = redis.Redis.from_url(aof_redis.url, decode_responses=True, **pool_options())
    boundary = ModelBoundary(client)
    try:
        async with (
            CeleryHarness(restart_settings, profile="confirmed") as harness,
            CeleryHarness(restart_settings, profile="streaming") as streamer,
        ):
            boundary.hold()
            stream_session = await streamer.create_session(SessionSpec())
            stream_task = await stream_session.start_task(TaskRequest(TextInput("stream")))
            streaming = _Subscription(stream_task)
            await wait_for(lambda: boundary.calls_for(stream_task.id.value))
            sessions = [stream_session]
            subscriptions = [streaming]
            for index in range(HELD_SESSIONS):
                session = await harness.create_session(SessionSpec())
                task = await session.start_task(TaskRequest(TextInput(f"restart-{index}")))
                sessions.append(session)
                subscriptions.append(_Subscription(task))
            queued = 1 + HELD_SESSIONS - SLOTS
            await wait_for(lambda: boundary.in_flight() == SLOTS)
            waiting = Keys.broker_queue_lists(restart_settings.queue)
            assert sum(client.llen(name) for name in waiting) == queued
            await wait_for(lambda: len(streaming.deltas()) >= 3)

            # Graceful shutdown (SIGTERM: the AOF is flushed), down a while, same port/dir.
            await asyncio.to_thread(aof_redis.stop)
            await asyncio.sleep(DOWN_SECONDS)
            await asyncio.to_thread(aof_redis.start)
            before_release = len(streaming.deltas())

            # Every worker process's cancellation listener subscribed again (one per
            # process: its runs share its loop).
            channel = keys.cancel_channel()
            listeners = len(restart_workers)
            await wait_for(lambda: dict(client.pubsub_numsub(channel)).get(channel) == listeners)
            boundary.release()
            try:
                async with asyncio.timeout(45):
                    outcomes = [await s.task.await_outcome() for s in subscriptions]
                    await asyncio.gather(*(s.done for s in subscriptions))
            except TimeoutError:
                pytest.fail(f"tasks did not settle after the restart\n{_logs(restart_workers)}")

            assert before_release < STREAM_CHUNKS  # events were still streaming meanwhile
            for subscription, outcome in zip(subscriptions, outcomes, strict=True):
                task_id = subscription.task.id.value
                assert isinstance(outcome, Completed), (outcome, _logs(restart_workers))
                stored = _stored_events(client, keys, task_id)
                terminals = [event for event in stored if isinstance(event, TerminalEvent)]
                assert len(terminals) == 1, stored
                assert stored[-1] is terminals[0], stored
                assert terminals[0].outcome == outcome
                # Every entry exactly once, in order, and nothing else.
                assert subscription.received == stored
                assert not any(isinstance(e, ObservationGap) for e in subscription.received)
                assert client.hget(keys.task(task_id), TaskField.STATE) == "completed"
                # Resumed, not rerun: the model was called once per task.
                assert len(boundary.calls_for(task_id)) == 1
            chunks = [f"chunk{index} " for index in range(STREAM_CHUNKS)]
            assert streaming.deltas() == [*chunks, "stream-complete"]
            assert boundary.overlaps == 0

            # New work after the restart: published, claimed, run on the kept history.
            follow_ups = [
                await session.start_task(TaskRequest(TextInput(f"after-{index}")))
                for index, session in enumerate(sessions)
            ]
            async with asyncio.timeout(30):
                later = [await task.await_outcome() for task in follow_ups]
            assert all(isinstance(outcome, Completed) for outcome in later), later
            for index, task in enumerate(follow_ups[1:]):
                (call,) = boundary.calls_for(task.id.value)
                assert f"restart-{index}" in call["texts"], call  # type: ignore[operator]
            assert boundary.overlaps == 0
        # Leaving released every session: the workers' maintenance consumers (reconnected)
        # deleted the checkpoint threads within the cleanup budget, or this raised.
    finally:
        boundary.settle()
        client.close()
