"""The autoscaling signal (issue 23 part 4): Prometheus gauges per queue (messages
waiting, the oldest wait, runs in flight, free run slots, live workers) and per worker
process (runs in flight, slots), from the workers' own reports (``workers.presence``)
and the broker's lists. The runs in flight are held at the model boundary, where the
model runs in the worker; the gauges are read from ``GET /metrics``."""

from __future__ import annotations

import asyncio
import time

import httpx
import redis
from prometheus_client.parser import text_string_to_metric_families

from harness import CeleryHarness
from wire.keys import Keys
from wire.presence import PRESENCE_TTL, live_workers
from wire.settings import Settings
from workers.presence import PresenceReporter

from .support.api import api_harness, auth, in_process
from .support.boundary import ModelBoundary
from .support.waiting import until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def _scrape(client: httpx.AsyncClient) -> Samples:
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _queue(samples: Samples, name: str, queue: str) -> float | None:
    return samples.get((name, (("queue", queue),)))


async def test_runs_in_flight_and_free_slots_follow_the_runs_the_workers_carry(
    settings: Settings, boundary: ModelBoundary
) -> None:
    queue = settings.queue
    latest: Samples = {}
    async with in_process(api_harness(settings, boundary)) as client:

        async def gauge(name: str) -> float | None:
            latest.clear()
            latest.update(await _scrape(client))
            return _queue(latest, name, queue)

        def slots_and_runs(samples: Samples) -> tuple[float, float]:
            return (
                sum(v for (n, _), v in samples.items() if n == "ahp_worker_run_slots"),
                sum(v for (n, _), v in samples.items() if n == "ahp_worker_runs_in_flight"),
            )

        idle = await _scrape(client)
        workers = _queue(idle, "ahp_queue_workers", queue)
        assert workers is not None
        assert workers >= 1
        slots, carried = slots_and_runs(idle)
        assert slots > 2
        # (An earlier test's run may still be settling: the gauges count what is carried.)
        assert _queue(idle, "ahp_queue_runs_in_flight", queue) == carried
        assert _queue(idle, "ahp_queue_free_run_slots", queue) == slots - carried
        boundary.hold()
        try:
            for n in range(2):
                started = await client.post(
                    "/v1/tasks", json={"input": f"held {n}"}, headers=auth()
                )
                assert started.status_code == 201, started.text
            await until(lambda: boundary.in_flight() == 2, "two model calls held")
            # A worker reports itself every few seconds: the gauge follows within that.
            deadline = time.monotonic() + 3 * PRESENCE_TTL.total_seconds()
            while (await gauge("ahp_queue_runs_in_flight") or 0) < 2:
                assert time.monotonic() < deadline, latest
                await asyncio.sleep(0.5)
            slots, carried = slots_and_runs(latest)
            assert carried >= 2
            assert _queue(latest, "ahp_queue_runs_in_flight", queue) == carried
            assert _queue(latest, "ahp_queue_free_run_slots", queue) == slots - carried
        finally:
            boundary.release()
        deadline = time.monotonic() + 3 * PRESENCE_TTL.total_seconds()
        while (await gauge("ahp_queue_runs_in_flight") or 0) >= 2:
            assert time.monotonic() < deadline, latest
            await asyncio.sleep(0.5)
    assert len(boundary.calls()) == 2


async def test_a_queue_nobody_serves_shows_its_waiting_start_and_its_age(
    settings: Settings, boundary: ModelBoundary
) -> None:
    unserved = settings.model_copy(update={"queue": f"ahp.nobody.{settings.namespace}"})
    async with in_process(api_harness(unserved, boundary)) as client:
        started = await client.post("/v1/tasks", json={"input": "never claimed"}, headers=auth())
        assert started.status_code == 201, started.text
        task_id = started.json()["id"]
        first = await _scrape(client)
        await asyncio.sleep(1.1)
        second = await _scrape(client)
    queue = unserved.queue
    assert _queue(first, "ahp_queue_messages_waiting", queue) == 1
    assert _queue(first, "ahp_queue_workers", queue) == 0
    assert _queue(first, "ahp_queue_free_run_slots", queue) == 0
    young = _queue(first, "ahp_queue_oldest_waiting_seconds", queue)
    older = _queue(second, "ahp_queue_oldest_waiting_seconds", queue)
    assert young is not None
    assert older is not None
    assert older >= young + 1.0
    # The default queue, served, has nothing waiting.
    assert _queue(first, "ahp_queue_messages_waiting", settings.queue) is None or (
        _queue(first, "ahp_queue_messages_waiting", settings.queue) == 0
    )
    # Leave nothing for a sweeper: the never-claimed task is cancelled.
    async with CeleryHarness(unserved) as harness:
        task = await harness.attach_task(task_id, tenant="alpha")
        await task.request_cancellation()
    assert boundary.calls() == []


async def test_a_worker_that_stops_withdraws_its_report_and_a_silent_one_lapses(
    settings: Settings, sync_redis: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    carried = [3]
    stopping = PresenceReporter(
        settings.redis_url,
        keys,
        name="node-a/1",
        queues=("q1",),
        slots=8,
        in_flight=lambda: carried[0],
    )
    silent = PresenceReporter(
        settings.redis_url, keys, name="node-b/2", queues=("q1", "q2"), slots=4, in_flight=lambda: 0
    )
    stopping.report()
    silent.report()
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    try:
        now = int(time.time() * 1000)
        found = {p.name: p for p in await live_workers(client, keys, now)}
        assert {(n, p.queues, p.slots, p.in_flight) for n, p in found.items()} >= {
            ("node-a/1", ("q1",), 8, 3),
            ("node-b/2", ("q1", "q2"), 4, 0),
        }
        stopping.stop()
        # Killed without a word: its report is judged by its age (and its key lapses).
        later = now + int(PRESENCE_TTL.total_seconds() * 1000) + 1
        names = {p.name for p in await live_workers(client, keys, later)}
        assert "node-a/1" not in names
        assert "node-b/2" not in names
        assert sync_redis.zscore(keys.workers(), "node-b/2") is None
        ttl = sync_redis.pttl(keys.worker_presence("node-b/2"))
        assert 0 < ttl <= PRESENCE_TTL.total_seconds() * 1000
    finally:
        await client.aclose()
        silent.stop()
