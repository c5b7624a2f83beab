"""The benchmark's event and cancel latency scenarios (``bench/latency_throughput.py``)
account for every chunk and every outcome, the floors (f) check every answer, and any
failure makes the run exit non-zero.

The scenarios run here for real (a tiny plan: real Redis, real worker processes); the
exit code's rules are checked on hand-made results, since a real run cannot be made to
lose a chunk on demand.
"""

from __future__ import annotations

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
    transport = await event_transport_floor(redis_url, count=20, interval=0.002)
    assert transport.clean
    assert all(0 < latency < 1 for latency in transport.latencies)


@pytest.mark.processes
async def test_the_http_benchmark_runs_every_flow_to_completion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench/http_vs_harness.py`` on a tiny plan: its own Redis, workers and API; every
    flow's tasks complete (a failed or refused one makes the run exit 1)."""
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
    ):
        assert f"  {flow} " in printed, flow
    assert "FAILURES" not in printed
    assert not http_vs_harness.FAILURES
