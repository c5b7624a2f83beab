"""The report of ``bench/scale.py``: what it prints, the targets beside the figures,
and its section of the results page (``docs/benchmarks.md``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.results_page import section_title
from bench.results_page import write_section as _write_section
from bench.scale_probes import describe_profiles
from bench.scale_results import (
    MIB,
    CpuWindow,
    LangGraphDevResult,
    Plan,
    Results,
    RunResult,
    SseResult,
    latency_ms,
)

ROOT = Path(__file__).resolve().parents[1]
SECTION = section_title("scale.py")


# -- report ---------------------------------------------------------------------------------


class Report:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)


def fmt_ms(value: float) -> str:
    return f"{value:8.1f}"


def latency_line(label: str, values: Sequence[float]) -> str:
    figures = latency_ms(values)
    cells = " ".join(f"{figures[key]:8.1f}" for key in ("p50", "p95", "p99", "max"))
    return f"  {label:<44} {cells}   (n={len(values)} chunks)"


def report_run(out: Report, result: RunResult, letter: str, plan: Plan) -> None:
    s = result.streams
    out(f"\n({letter}) {result.label}: {result.layout}")
    out(
        f"  {s.started} tasks in {s.started} sessions, all started at once; model "
        f"{plan.model_seconds:g} s, {plan.chunks} chunks each"
    )
    out(
        f"  wall, first start -> last outcome: {result.cpu.wall:.2f} s; "
        f"{result.per_second:.1f} tasks/s"
    )
    peaks = ", ".join(f"pid {pid}: {n}" for pid, n in sorted(result.peak_by_pid.items()))
    out(f"  peak runs in flight: {result.peak_all} over the node ({peaks})")
    for label, peak in result.samples.peaks.items():
        idle = result.samples.idle_rss.get(label, 0)
        per_run = (peak.rss - idle) / peak.inflight / MIB if peak.inflight else float("nan")
        out(
            f"  {label}: RSS idle {idle / MIB:.1f} MiB, at its sampled peak of {peak.inflight} "
            f"in flight ({peak.at:.1f} s in) {peak.rss / MIB:.1f} MiB: "
            f"{per_run:.3f} MiB per in-flight run above idle"
        )
    out(
        f"  RSS per in-flight run over the node: {result.rss_per_run() / MIB:.3f} MiB above "
        f"idle, {result.rss_whole_per_run() / MIB:.2f} MiB of the whole RSS"
    )
    if letter == "b":
        out(
            "  (each prefork run holds a pool child, forked before the warm-up: its cost is the "
            "whole RSS per run, not the growth above idle)"
        )
    parts = ", ".join(
        f"{label} {seconds * 1000 / max(1, s.completed):.2f}"
        for label, seconds in result.cpu.parts.items()
    )
    out(
        f"  CPU per completed task, all processes: {result.cpu_ms_per_task:.2f} ms ({parts}); "
        f"other processes on the machine: {result.cpu.other:.1f} s"
    )
    interference(out, result.cpu)
    fates = ", ".join(f"{kind}={n}" for kind, n in sorted(s.fates.items()))
    out(f"  tasks: {s.completed}/{s.started} completed with every chunk ({fates})")
    out(
        f"  chunks: expected {s.expected}, received {s.received}, lost {s.lost}, twice "
        f"{s.duplicates}, tasks out of order {s.disordered}, subscription gaps {s.gaps}"
    )
    c = result.calls
    redelivered = (
        f"; task records with deliveries > 1: {c.redelivered}, sweeper recoveries {c.recoveries}"
        if letter != "e"
        else ""
    )
    out(
        f"  model calls: {c.calls} for {c.tasks_called} tasks; tasks called more than once "
        f"(lost lease or redelivery): {c.called_twice}, extra calls {c.extra}{redelivered}"
    )
    if result.cleanup_errors:
        out(f"  session releases that failed (after the window): {result.cleanup_errors}")
    out(f"  event latency, ms {'':<31} {'p50':>8} {'p95':>8} {'p99':>8} {'max':>8}")
    if s.whole_messages:
        out(latency_line("model's last chunk -> MessageCompleted", s.latencies))
        out(
            f"  ({s.whole_messages} tasks streamed no deltas: the harness publishes the "
            "model's answer as one MessageCompleted;\n   its latency is taken from the last "
            "chunk's stamp, one sample per task)"
        )
    else:
        out(latency_line("model -> caller's task.events()", s.latencies))
    if result.samples.connections_at_peak or result.samples.connections_max:
        at_peak = result.samples.connections_at_peak.get("caller", 0)
        most = result.samples.connections_max.get("caller", 0)
        out(
            f"  caller's Redis connections (CLIENT LIST by its own sockets): {at_peak} at the "
            f"peak ({result.samples.total_at_peak} in flight), {most} at most"
        )
    if result.profiles:
        out(
            "  where CPU went (py-spy --gil --nonblocking: samples of the thread holding the "
            "GIL, by leaf function, top 15):"
        )
        for line in describe_profiles(result.profiles):
            out(line)


def report_sse(out: Report, result: SseResult, plan: Plan) -> None:
    s = result.streams
    out(
        f"\n(d) {s.started} SSE streams through one `ahp-celery api` process, all at once "
        f"(POST /v1/tasks/stream, aiohttp in this process), on (a)'s worker node"
    )
    out(
        f"  wall, first request -> last terminal event: {result.cpu.wall:.2f} s; peak runs "
        f"in flight {result.peak_all}"
    )
    at_peak = result.samples.connections_at_peak.get("api", 0)
    most = result.samples.connections_max.get("api", 0)
    out(
        f"  API process's Redis connections: {at_peak} at the peak "
        f"({result.samples.total_at_peak} in flight), {most} at most"
    )
    parts = ", ".join(
        f"{label} {seconds * 1000 / max(1, s.completed):.2f}"
        for label, seconds in result.cpu.parts.items()
    )
    out(
        f"  CPU per completed stream, all processes: {cpu_ms(result.cpu, s.completed):.2f} ms "
        f"({parts}); other processes on the machine: {result.cpu.other:.1f} s"
    )
    interference(out, result.cpu)
    fates = ", ".join(f"{kind}={n}" for kind, n in sorted(s.fates.items()))
    out(f"  streams: {s.completed}/{s.started} completed with every chunk ({fates})")
    out(
        f"  chunks: expected {s.expected}, received {s.received}, lost {s.lost}, twice "
        f"{s.duplicates}, streams out of order {s.disordered}"
    )
    out(f"  event latency, ms {'':<31} {'p50':>8} {'p95':>8} {'p99':>8} {'max':>8}")
    out(latency_line("model -> SSE client", s.latencies))


def cpu_ms(window: CpuWindow, tasks: int) -> float:
    return window.total * 1000 / tasks if tasks else float("nan")


def interference(out: Report, window: CpuWindow) -> None:
    """Say so when processes outside the run used a tenth of the machine or more, and
    when the wait for a quiet machine before the window ran out."""
    if not window.quiet:
        out(
            f"  WARNING: the machine was not quiet before the window (waited "
            f"{window.waited:.0f} s for processes outside the run to use < 10 % of it)"
        )
    elif window.waited > 5:
        out(f"  (waited {window.waited:.0f} s for a quiet machine before the window)")
    cores = os.cpu_count() or 1
    share = window.other / (window.wall * cores) if window.wall > 0 else 0.0
    if share >= 0.1:
        out(
            f"  WARNING: processes outside this run used {window.other:.1f} s of CPU in the "
            f"window ({share * 100:.0f} % of the machine): these figures are distorted"
        )


def report_langgraph(out: Report, result: LangGraphDevResult, plan: Plan) -> None:
    s = result.streams
    out(
        f"\n(f) the same graph (START -> model -> END, the same stamped model, no Redis) on "
        f"`langgraph dev` (in-memory runtime, --n-jobs-per-worker {result.jobs}),\n    "
        f"{s.started} stateless runs at once, POST /runs/stream (messages-tuple), aiohttp "
        "in this process"
    )
    out(
        f"  wall, first request -> last stream's end: {result.cpu.wall:.2f} s; "
        f"{result.per_second:.1f} tasks/s; streams in flight at most {result.peak_inflight}"
    )
    parts = ", ".join(
        f"{label} {seconds * 1000 / max(1, s.completed):.2f}"
        for label, seconds in result.cpu.parts.items()
    )
    out(
        f"  CPU per completed run, all processes: {cpu_ms(result.cpu, s.completed):.2f} ms "
        f"({parts}); other processes on the machine: {result.cpu.other:.1f} s"
    )
    interference(out, result.cpu)
    per_run = (
        (result.peak_rss - result.idle_rss) / result.rss_inflight / MIB
        if result.rss_inflight
        else float("nan")
    )
    out(
        f"  server RSS: idle {result.idle_rss / MIB:.1f} MiB, at most {result.peak_rss / MIB:.1f} "
        f"MiB ({result.rss_inflight} in flight then): {per_run:.3f} MiB per in-flight run "
        "above idle"
    )
    fates = ", ".join(f"{kind}={n}" for kind, n in sorted(s.fates.items()))
    out(f"  runs: {s.completed}/{s.started} streamed every chunk ({fates})")
    out(
        f"  chunks: expected {s.expected}, received {s.received}, lost {s.lost}, twice "
        f"{s.duplicates}, runs out of order {s.disordered} (LangGraph's server: not counted "
        "in the exit code)"
    )
    out(f"  event latency, ms {'':<31} {'p50':>8} {'p95':>8} {'p99':>8} {'max':>8}")
    out(latency_line("model -> SSE client", s.latencies))


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


@dataclass(frozen=True)
class Target:
    label: str
    measured: float | None
    unit: str
    met: bool | None  # None: not evaluated at this size

    def line(self) -> str:
        if self.measured is None:
            return f"  {self.label:<58} {'n/a':>10}       not measured"
        verdict = {True: "met", False: "MISSED", None: "not evaluated at this size"}[self.met]
        return f"  {self.label:<58} {self.measured:10.3f} {self.unit:<5} {verdict}"


def targets(results: Results, plan: Plan) -> list[Target]:
    rows: list[Target] = []
    a = results.threads
    full = plan.tasks == 1000 and plan.model_seconds == 3.0
    if a is None:
        for label, unit in (
            ("(a) 1,000 tasks within 20 s wall", "s"),
            ("(a) runs in flight at the peak >= 90 % of the tasks", "runs"),
            ("(a) CPU per task, all processes <= 15 ms", "ms"),
            ("(a) RSS per in-flight run <= 1 MiB", "MiB"),
            ("(c) caller's Redis connections <= 16", "conns"),
            ("(a)/(c) event p99 <= 250 ms (harness)", "ms"),
        ):
            rows.append(Target(label, None, unit, None))
    else:
        rows.append(
            Target(
                "(a) 1,000 tasks within 20 s wall",
                a.cpu.wall,
                "s",
                a.cpu.wall <= 20.0 if full else None,
            )
        )
        rows.append(
            Target(
                f"(a) runs in flight at the peak >= 90 % of the tasks ({0.9 * a.tasks:.0f})",
                float(a.peak_all),
                "runs",
                a.peak_all >= 0.9 * a.tasks,
            )
        )
        rows.append(
            Target(
                "(a) CPU per task, all processes <= 15 ms",
                a.cpu_ms_per_task,
                "ms",
                a.cpu_ms_per_task <= 15.0,
            )
        )
        rss = a.rss_per_run() / MIB
        rows.append(Target("(a) RSS per in-flight run <= 1 MiB", rss, "MiB", rss <= 1.0))
        conns = a.samples.connections_at_peak.get("caller")
        rows.append(
            Target(
                "(c) caller's Redis connections at the peak <= 16",
                None if conns is None else float(conns),
                "conns",
                None if conns is None else conns <= 16,
            )
        )
        p99 = latency_ms(a.streams.latencies)["p99"]
        rows.append(Target("(a)/(c) event p99 <= 250 ms (harness)", p99, "ms", p99 <= 250.0))
    if results.sse is None:
        rows.append(Target("(d) event p99 <= 500 ms (SSE)", None, "ms", None))
    else:
        p99 = latency_ms(results.sse.streams.latencies)["p99"]
        rows.append(Target("(d) event p99 <= 500 ms (SSE)", p99, "ms", p99 <= 500.0))
    return rows


def report(out: Report, results: Results, plan: Plan) -> list[str]:
    if results.threads is not None:
        report_run(out, results.threads, "a", plan)
    if results.prefork is not None:
        report_run(out, results.prefork, "b", plan)
    if results.threads is not None and results.prefork is not None:
        a, b = results.threads, results.prefork
        out(
            f"\n  throughput (a)/(b): {ratio(a.per_second, b.per_second):.1f}x "
            f"({a.per_second:.1f} tasks/s with {a.tasks} tasks against {b.per_second:.2f} "
            f"tasks/s with {b.tasks} tasks, as run)"
        )
    if results.sse is not None:
        report_sse(out, results.sse, plan)
    if results.reference is not None:
        report_run(out, results.reference, "e", plan)
    if results.threads is not None and results.reference is not None:
        a, e = results.threads, results.reference
        out(
            f"\n  (a) against the floor (e): wall {ratio(a.cpu.wall, e.cpu.wall):.2f}x, CPU per "
            f"task {ratio(a.cpu_ms_per_task, e.cpu_ms_per_task):.2f}x, event p50 "
            f"{ratio(latency_ms(a.streams.latencies)['p50'], latency_ms(e.streams.latencies)['p50']):.2f}x, "  # noqa: E501
            f"p99 {ratio(latency_ms(a.streams.latencies)['p99'], latency_ms(e.streams.latencies)['p99']):.2f}x"  # noqa: E501
        )
    if results.langgraph_dev is None:
        out(f"\n(f) langgraph dev: {results.langgraph_dev_note}")
    else:
        report_langgraph(out, results.langgraph_dev, plan)
        if results.threads is not None:
            a, f = results.threads, results.langgraph_dev
            fa, ff = latency_ms(a.streams.latencies), latency_ms(f.streams.latencies)
            out(
                f"\n  (a) against langgraph dev (f): throughput "
                f"{ratio(a.per_second, f.per_second):.2f}x, CPU per task "
                f"{ratio(a.cpu_ms_per_task, cpu_ms(f.cpu, f.streams.completed)):.2f}x, event "
                f"p50 {ratio(fa['p50'], ff['p50']):.2f}x, p99 {ratio(fa['p99'], ff['p99']):.2f}x"
            )
    out("\ntargets (2-core machine; reported, not asserted)")
    for row in targets(results, plan):
        out(row.line())
    found = results.failures()
    out(f"\nfailures (tasks not completed, chunks lost, scenarios aborted): {len(found) or 'none'}")
    for problem in found[:20]:
        out(f"  {problem[:400]}")
    return found


# -- the results page -----------------------------------------------------------------------


def write_section(page: Path, body: str) -> None:
    """Replace (or add) this benchmark's section of ``page``."""
    _write_section(page, SECTION, body)
