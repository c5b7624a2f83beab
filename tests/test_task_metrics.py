"""Pool-wide task metrics, kept by the scripts in Redis: counts by outcome, queue, and the
duration and time-to-start histograms."""

from __future__ import annotations

import math

from agent_harness_protocol import Cancelled, Completed, SessionSpec, TaskRequest, TextInput

from harness import BusyPolicy, CeleryHarness, Histogram
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.waiting import wait_for


def _request(text: str) -> TaskRequest:
    return TaskRequest(TextInput(text))


def _check_shape(histogram: Histogram) -> None:
    counts = [count for _, count in histogram.buckets]
    assert counts == sorted(counts)  # cumulative
    assert math.isinf(histogram.buckets[-1][0])
    assert counts[-1] == histogram.count


async def test_metrics_count_outcomes_queue_and_timings_across_the_pool(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with CeleryHarness(settings, run_metadata=boundary.run_metadata) as harness:
        before = await harness.task_metrics()
        session = await harness.create_session(SessionSpec())
        boundary.hold()
        running = await session.start_task(_request("metrics running"))
        await wait_for(lambda: boundary.in_flight() == 1)
        queued = await session.start_task(_request("metrics queued"), if_busy=BusyPolicy.ENQUEUE)
        during = await harness.task_metrics()
        assert during.statistics.queued == before.statistics.queued + 1
        assert during.running >= 1
        await queued.request_cancellation()
        boundary.release()
        assert isinstance(await running.await_outcome(), Completed)
        assert isinstance(await queued.await_outcome(), Cancelled)
        after = await harness.task_metrics()
        stats, base = after.statistics, before.statistics
        assert stats.started == base.started + 2
        assert stats.settled["completed"] == base.settled["completed"] + 1
        assert stats.settled["cancelled"] == base.settled["cancelled"] + 1
        assert stats.queued == base.queued
        assert stats.duration.count == base.duration.count + 2
        assert stats.wait.count == base.wait.count + 1  # the cancelled one never started
        assert stats.duration.total > base.duration.total
        assert after.queue_depth is not None
        for histogram in (stats.duration, stats.wait):
            _check_shape(histogram)
