"""``GET /metrics``: the pool's task figures and the API's own request counters, in the
Prometheus text format.

The task figures come from Redis (``CeleryHarness.task_metrics``), kept there by the Lua
scripts of every caller and worker, so any API replica reports the whole pool. The
request counters are this process's own (label ``route`` is the route template, never a
raw path: ids do not become label values).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from harness.info import TaskMetrics
from wire.dead_letters import DeadLetterKind
from wire.statistics import Histogram as TaskHistogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class RequestMetrics:
    """The API's request counters, in a registry of their own (one per app)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "ahp_api_requests",
            "HTTP requests answered, by method, route template and status.",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self.seconds = Histogram(
            "ahp_api_request_duration_seconds",
            "Time to the response's first byte (an SSE stream counts until it starts).",
            ("method", "route"),
            registry=self.registry,
        )

    def counting(self, scope: Scope, send: Send) -> Send:
        """``send`` that counts the request when its response starts, labelled with the
        template of the route that answered (``scope["route"]`` by then)."""
        started = time.perf_counter()
        counted = False

        async def counting_send(message: Message) -> None:
            nonlocal counted
            if message["type"] == "http.response.start" and not counted:
                counted = True
                route = _route(scope)
                self.seconds.labels(scope["method"], route).observe(time.perf_counter() - started)
                self.requests.labels(scope["method"], route, str(message["status"])).inc()
            await send(message)

        return counting_send


class CountRequests:
    """ASGI middleware counting every answered request (413s and 401s included)."""

    def __init__(self, app: ASGIApp, metrics: RequestMetrics) -> None:
        self._app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        await self._app(scope, receive, self._metrics.counting(scope, send))


def _route(scope: Scope) -> str:
    """The template of the route that answered (the router records it in the scope it
    shares), or ``unmatched`` (a 404 route, a body refused before routing)."""
    route = scope.get("route")
    return str(getattr(route, "path", "unmatched"))


class _Snapshot(Collector):
    def __init__(self, metrics: TaskMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        statistics = metrics.statistics
        if metrics.queue_depth is not None:
            yield GaugeMetricFamily(
                "ahp_broker_queue_depth",
                "Run messages waiting at the broker for a worker.",
                value=metrics.queue_depth,
            )
        tasks = GaugeMetricFamily(
            "ahp_tasks", "Unsettled tasks of the pool by state.", labels=("state",)
        )
        tasks.add_metric(("starting",), metrics.starting)
        tasks.add_metric(("running",), metrics.running)
        tasks.add_metric(("queued",), statistics.queued)
        tasks.add_metric(("parked",), statistics.parked)
        yield tasks
        yield CounterMetricFamily(
            "ahp_tasks_started", "Tasks started (queued ones included).", value=statistics.started
        )
        settled = CounterMetricFamily(
            "ahp_tasks_settled", "Settled tasks by outcome.", labels=("outcome",)
        )
        for outcome, count in sorted(statistics.settled.items()):
            settled.add_metric((outcome,), count)
        yield settled
        yield _histogram(
            "ahp_task_duration_seconds", "From a task's start to its settle.", statistics.duration
        )
        yield _histogram(
            "ahp_task_time_to_start_seconds",
            "From a task's start to its first claim by a worker.",
            statistics.wait,
        )
        yield from _pool_gauges(metrics)


def _pool_gauges(metrics: TaskMetrics) -> Iterator[Metric]:
    """The autoscaling signal (``wire.presence``): per queue and per worker process."""
    waiting = GaugeMetricFamily(
        "ahp_queue_messages_waiting", "Run messages waiting at the broker.", labels=("queue",)
    )
    oldest = GaugeMetricFamily(
        "ahp_queue_oldest_waiting_seconds",
        "How long the oldest start waiting on the queue has waited (0: none waits).",
        labels=("queue",),
    )
    in_flight = GaugeMetricFamily(
        "ahp_queue_runs_in_flight",
        "Runs carried by the live worker processes consuming the queue.",
        labels=("queue",),
    )
    free = GaugeMetricFamily(
        "ahp_queue_free_run_slots",
        "Free run slots of the live worker processes consuming the queue.",
        labels=("queue",),
    )
    consumers = GaugeMetricFamily(
        "ahp_queue_workers", "Live worker processes consuming the queue.", labels=("queue",)
    )
    for gauge in metrics.queues:
        if gauge.waiting is not None:
            waiting.add_metric((gauge.queue,), gauge.waiting)
            age = gauge.oldest_wait.total_seconds() if gauge.oldest_wait is not None else 0.0
            oldest.add_metric((gauge.queue,), age)
        in_flight.add_metric((gauge.queue,), gauge.in_flight)
        free.add_metric((gauge.queue,), gauge.free_slots)
        consumers.add_metric((gauge.queue,), gauge.workers)
    yield from (waiting, oldest, in_flight, free, consumers)
    worker_runs = GaugeMetricFamily(
        "ahp_worker_runs_in_flight", "Runs a worker process carries now.", labels=("worker",)
    )
    worker_slots = GaugeMetricFamily(
        "ahp_worker_run_slots", "Runs a worker process carries at most.", labels=("worker",)
    )
    for worker in metrics.workers:
        worker_runs.add_metric((worker.name,), worker.in_flight)
        worker_slots.add_metric((worker.name,), worker.slots)
    yield from (worker_runs, worker_slots)


def _histogram(name: str, documentation: str, histogram: TaskHistogram) -> Metric:
    buckets = [
        ("+Inf" if bound == float("inf") else _bound(bound), float(count))
        for bound, count in histogram.buckets
    ]
    return HistogramMetricFamily(
        name, documentation, buckets=buckets, sum_value=histogram.total.total_seconds()
    )


def _bound(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


class _DeadLetters(Collector):
    def __init__(self, counts: Mapping[DeadLetterKind, int]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        letters = CounterMetricFamily(
            "ahp_dead_letters",
            "Dead letters recorded by kind: tasks failed after max_deliveries lost "
            "deliveries, malformed messages dropped from the queue.",
            labels=("kind",),
        )
        for kind in DeadLetterKind:
            letters.add_metric((kind.value,), self._counts.get(kind, 0))
        yield letters


def render(
    metrics: TaskMetrics,
    requests: RequestMetrics,
    dead_letters: Mapping[DeadLetterKind, int] | None = None,
) -> bytes:
    pool = CollectorRegistry(auto_describe=False)
    pool.register(_Snapshot(metrics))
    if dead_letters is not None:
        pool.register(_DeadLetters(dead_letters))
    return generate_latest(pool) + generate_latest(requests.registry)


__all__ = ["CONTENT_TYPE", "CountRequests", "RequestMetrics", "render"]
