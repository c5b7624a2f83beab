"""The benchmark's event and cancel latency scenarios (``bench/latency_throughput.py``)
account for every chunk and every outcome, the floors (f) check every answer, and any
failure makes the run exit non-zero.

The scenarios run here for real (a tiny plan: real Redis, real worker processes); the
exit code's rules are checked on hand-made results, since a real run cannot be made to
lose a chunk on demand.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench import clock_profiles
from bench.floors import (
    FloorResult,
    Floors,
    TransportFloor,
    event_transport_floor,
    measure_floors,
)
from bench.latency_throughput import (
    QUICK,
    Bench,
    CancelLatencyResult,
    CpuWindow,
    EventLatencyResult,
    Plan,
    Results,
    Tally,
    ThroughputResult,
    exit_code,
    failures,
    scenario_cancel_latency,
    scenario_event_latency,
    targets,
)

TINY = Plan(**{**QUICK.__dict__, "mode": "test", "event_tasks": 2, "cancel_samples": 2})


@pytest.mark.processes
async def test_event_and_cancel_scenarios_account_for_every_chunk_and_outcome(
    redis_url: str, tmp_path: Path
) -> None:
    bench = Bench(redis_url, TINY, tmp_path)
    try:
        events = await scenario_event_latency(bench)
        cancel = await scenario_cancel_latency(bench)
    finally:
        bench.stop_all()

    chunks = TINY.event_tasks * clock_profiles.EVENT_CHUNKS
    assert (events.expected, events.produced, events.received) == (chunks, chunks, chunks)
    assert len(events.latencies) == chunks
    assert (events.duplicates, events.gaps) == (0, 0)
    assert events.tally.counts == {"ok": TINY.event_tasks}
    assert cancel.tally.counts == {"ok": TINY.cancel_samples}
    assert len(cancel.latencies) == len(cancel.requests) == TINY.cancel_samples
    assert all(
        0 < request <= total
        for request, total in zip(cancel.requests, cancel.latencies, strict=True)
    )

    results = Results(events=events, cancel=cancel)
    assert failures(results) == []
    rows = targets(results, TINY)
    assert exit_code(failures(results), rows, require_targets=False) == 0


def clean_results() -> Results:
    events = EventLatencyResult("events", 1, 3, latencies=[0.0005] * 3, produced=3, received=3)
    events.tally.record("ok", "done")
    cancel = CancelLatencyResult("cancel", latencies=[0.005], requests=[0.001])
    cancel.tally.record("ok", "cancelled")
    return Results(events=events, cancel=cancel)


def test_a_clean_run_exits_zero_and_unmet_targets_only_count_when_required() -> None:
    results = clean_results()
    assert failures(results) == []
    rows = targets(results, TINY)
    assert exit_code([], rows, require_targets=False) == 0
    # Scenarios (a)-(c) were not run here: their targets are not met.
    assert exit_code([], rows, require_targets=True) == 2


def test_a_lost_chunk_fails_the_run() -> None:
    results = clean_results()
    assert results.events is not None
    results.events.received = 2
    found = failures(results)
    assert found == ["(d) 1 of 3 chunks never reached the caller"]
    assert exit_code(found, targets(results, TINY), require_targets=False) == 1


def test_a_cancel_that_did_not_end_cancelled_fails_the_run() -> None:
    results = clean_results()
    assert results.cancel is not None
    results.cancel.tally.record("Completed", "ran to its end")
    found = failures(results)
    assert len(found) == 1
    assert found[0].startswith("(e) tasks: 1/2 ok")
    row = next(row for row in targets(results, TINY) if row.label.startswith("(e)"))
    assert not row.ok
    assert "result invalid" in row.verdict
    assert exit_code(found, [], require_targets=False) == 1


def test_a_failed_throughput_task_or_an_aborted_scenario_fails_the_run() -> None:
    results = clean_results()
    tally = Tally()
    tally.record("ok", "fine")
    tally.record("Failed", "boom")
    results.throughput = [ThroughputResult("ours: CeleryHarness", "2 proc", 2, CpuWindow(), tally)]
    results.aborted.append("(b) long session: aborted: RuntimeError: worker exited")
    found = failures(results)
    assert len(found) == 2
    assert exit_code(found, [], require_targets=False) == 1


def test_a_floor_turn_not_answered_fails_the_run() -> None:
    results = clean_results()
    results.floors = Floors(
        [
            FloorResult("graph turn, no checkpointer", 3, 3, 0.1, 0.01),
            FloorResult("graph turn + AsyncRedisSaver (upstream)", 3, 2, 0.1, 0.05),
        ],
        TransportFloor(3, (0.001, 0.001)),
    )
    found = failures(results)
    assert found == [
        "(f) graph turn + AsyncRedisSaver (upstream): 2/3 answered as expected",
        "(f) event transport: 2/3 entries read",
    ]
    assert exit_code(found, [], require_targets=False) == 1


async def test_the_floors_run_the_graph_for_real(redis_url: str) -> None:
    """Scenario (f) on a tiny plan runs both graphs and checks every answer."""
    floors = await measure_floors(
        redis_url, "You are a benchmark assistant.", 2, 2, lambda pids: 0.5 * len(pids), None
    )
    assert [floor.label for floor in floors] == [
        "graph turn, no checkpointer",
        "graph turn + AsyncRedisSaver (upstream)",
    ]
    assert all(floor.clean and floor.ok == 4 for floor in floors)


async def test_the_event_transport_floor_reads_every_entry(redis_url: str) -> None:
    began = time.time_ns()
    transport = await event_transport_floor(redis_url, count=20, interval=0.002)
    took = (time.time_ns() - began) / 1e9
    assert transport.clean
    # Each latency is a delay of this run (stamped after it began, read before it ended,
    # on the same clock); how long they are is bench/latency_throughput.py's (f) figure.
    assert all(0 < latency < took for latency in transport.latencies)


@pytest.mark.processes
async def test_the_http_benchmark_runs_every_flow_to_completion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench/http_vs_harness.py`` on a tiny plan: its own Redis, workers and API; every
    flow's tasks complete (a failed or refused one makes the run exit 1), the LangGraph
    dialect's through ``langgraph-sdk`` and through aiohttp included."""
    from bench import http_vs_harness

    tiny = http_vs_harness.Plan(latency_samples=2, sessions=2, turns=2, warm_up=1, rounds=1)
    assert await http_vs_harness.run(tiny, tmp_path) == 0
    printed = capsys.readouterr().out
    for flow in (
        "harness",
        "harness-stream",
        "http-stream",
        "http-wait",
        "harness-run",
        "harness-run-stream",
        "http-run-stream",
        "http-run-wait",
        "http-stream-2req",
        "http-wait-2req",
        "http-round-trip",
        "sdk-stream",
        "sdk-run-stream",
        "lg-stream",
        "lg-run-stream",
    ):
        assert f"  {flow} " in printed, flow
    for flow in ("sdk-stream", "sdk-run-stream", "lg-stream", "lg-run-stream"):
        assert f"  {flow} " in printed.split("targets")[1], flow  # each with its target
    assert "FAILURES" not in printed
    assert not http_vs_harness.FAILURES


# -- bench/scale.py ---------------------------------------------------------------------------


@pytest.mark.processes
async def test_the_scale_scenarios_count_every_task_and_every_chunk(
    redis_url: str, tmp_path: Path
) -> None:
    """``bench/scale.py`` on tiny sizes: real worker processes (threads and prefork), the
    API process, the in-process reference; every task completes with each of its chunks
    received once, in order, and the counters the report rests on were taken."""
    from bench import scale, scale_results

    plan = scale_results.Plan(
        tasks=6,
        processes=2,
        runs_per_process=8,
        prefork_tasks=2,
        prefork_concurrency=2,
        sse_streams=3,
        model_seconds=1.0,
        warm_up_per_process=1,
        task_timeout=60.0,
        quiet_wait=0.0,  # a test does not wait for the machine
    )
    bench = scale.Bench(redis_url, None, plan, tmp_path)
    results = scale_results.Results()
    threads, workers, settings = await scale.scenario_threads(bench)
    try:
        results.threads = threads
        results.sse = await scale.scenario_sse(bench, workers, settings)
    finally:
        await scale.stop_workers(workers)
    results.prefork = await scale.scenario_prefork(bench)
    results.reference = await scale.scenario_reference(bench)

    for result, tasks in (
        (results.threads, plan.tasks),
        (results.prefork, plan.prefork_tasks),
        (results.reference, plan.tasks),
        (results.sse, plan.sse_streams),
    ):
        assert result is not None
        streams = result.streams
        assert streams.started == streams.completed == tasks
        assert streams.received == streams.expected == plan.chunks * tasks
        assert (streams.lost, streams.duplicates, streams.disordered, streams.gaps) == (0, 0, 0, 0)
        assert streams.fates == {"Completed": tasks}
        assert result.peak_all >= 1
        assert result.cpu.wall > 0
    assert len(results.threads.streams.latencies) == plan.chunks * plan.tasks
    assert len(results.sse.streams.latencies) == plan.chunks * plan.sse_streams
    # The reference streams no deltas: one whole message (and latency) per task.
    assert results.reference.streams.whole_messages == len(results.reference.streams.latencies)
    assert results.reference.streams.whole_messages == plan.tasks
    for run, tasks in (
        (results.threads, plan.tasks),
        (results.prefork, plan.prefork_tasks),
        (results.reference, plan.tasks),
    ):
        assert run.calls.tasks_called == tasks
        assert run.calls.calls == tasks + run.calls.extra
        assert sum(peak.inflight for peak in run.samples.peaks.values()) >= 1
    # The model ran in the threads workers' own processes, and in the prefork pool children.
    assert 1 <= len(results.threads.peak_by_pid) <= plan.processes
    assert 1 <= len(results.prefork.peak_by_pid) <= plan.prefork_concurrency
    assert results.threads.samples.connections_at_peak.get("caller", 0) >= 1
    assert results.sse.samples.connections_at_peak.get("api", 0) >= 1
    assert results.failures() == []


def test_a_lost_repeated_or_reordered_chunk_fails_the_scale_run() -> None:
    from bench.scale_results import Results, RunResult, Streams

    def ok(stamped: list[int]) -> str:
        return "".join(f"[{index}@{1000 + index}]" for index in stamped)

    streams = Streams(chunks=3)
    streams.started = 5
    streams.account([0, 1, 2], "Completed", ok([0, 1, 2]), "fine")
    streams.account([0, 2], "Completed", ok([0, 1, 2]), "a chunk lost on the way")
    streams.account([0, 1, 1, 2], "Completed", ok([0, 1, 2]), "a chunk twice")
    streams.account([1, 0, 2], "Completed", ok([0, 1, 2]), "out of order")
    streams.account([0, 1], "Failed", "", "the task failed")
    assert streams.completed == 1
    assert streams.not_completed == 4
    assert (streams.lost, streams.duplicates, streams.disordered) == (2, 1, 1)
    assert streams.fates["Completed"] == 1
    assert streams.fates["Completed(chunks lost or repeated on the way)"] == 2
    assert streams.fates["Completed(chunks out of order on the way)"] == 1
    assert streams.fates["Failed"] == 1

    clean = Streams(chunks=3)
    clean.started = 1
    clean.account([0, 1, 2], "Completed", ok([0, 1]), "the output lacks a chunk")
    assert clean.completed == 0

    from bench.scale_results import Calls, CpuWindow, Samples

    results = Results(
        threads=RunResult("a", "layout", streams, CpuWindow(), Samples({}), {}, 0, Calls())
    )
    found = results.failures()
    assert any("4 of 5 tasks did not complete" in line for line in found)
    assert any("2 of 15 chunks never arrived" in line for line in found)
    assert any("1 chunks arrived twice" in line for line in found)
    assert Results().failures() == []


def test_the_scale_results_page_replaces_only_its_own_section(tmp_path: Path) -> None:
    from bench.scale_report import SECTION, write_section

    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmark results\n\n## other bench\n\nkept\n")
    write_section(page, "first run")
    write_section(page, "second run")
    text = page.read_text()
    assert text.count(SECTION) == 1
    assert "second run" in text
    assert "first run" not in text
    assert "## other bench\n\nkept" in text


def test_py_spy_raw_output_is_summed_by_leaf_function() -> None:
    from bench.scale_probes import by_package, self_time

    raw = "\n".join(
        [
            "<module> (a.py:1);run (b.py:10);encode (c.py:5) 7",
            "<module> (a.py:1);run (b.py:11);encode (c.py:6) 3",
            "<module> (a.py:1);EpollSelector.select (selectors.py:468) 40",
            'process 12:"python -m celery";thread (0x7f) 2',
            "<module> (a.py:1);run (b.py:12) 5",
        ]
    )
    samples, waiting, top = self_time(raw)
    assert (samples, waiting) == (55, 40)
    assert top == (("encode (c.py)", 10), ("run (b.py)", 5))
    assert by_package(raw) == (("c", 10), ("b", 5))


async def test_redis_connections_are_matched_to_this_process_by_its_sockets(
    redis_url: str,
) -> None:
    import os
    from urllib.parse import urlsplit

    import redis.asyncio as aioredis

    from bench.scale_probes import redis_clients_of

    port = urlsplit(redis_url).port or 6379
    probe = aioredis.Redis.from_url(redis_url, client_name="probe")
    held = [aioredis.Redis.from_url(redis_url) for _ in range(3)]
    mine = {"me": os.getpid()}
    try:
        await probe.ping()
        before = (await redis_clients_of(probe, mine, port, exclude=["probe"]))["me"]
        for client in held:
            await client.ping()  # each keeps its connection open in its pool
        after = (await redis_clients_of(probe, mine, port, exclude=["probe"]))["me"]
        assert after == before + 3
    finally:
        for client in held:
            await client.aclose()
            await client.connection_pool.disconnect()
        await probe.aclose()
