#!/usr/bin/env python
"""What OpenTelemetry tracing costs: the same workload untraced, traced, and on the
baseline commit (before tracing existed), measured in one run.

    python bench/tracing_cost.py [--quick] [--sessions 10] [--tasks 20] [--rounds 3]
                                 [--baseline REF | --no-baseline] [--redis-url URL]

Modes, each a driver process of its own (the caller, ``harness.CeleryHarness``) with one
worker OS process (``celery worker -P threads``, the deployment's layout), against one
Redis (embedded Redis 8 unless ``--redis-url``), the default ``scripted`` profile:

* off       -- this tree, no tracer provider anywhere (the default deployment);
* on        -- this tree, tracing on everywhere: the caller installs the SDK with a
               ``BatchSpanProcessor`` and the OTLP/HTTP exporter, the worker sets it up
               from ``OTEL_EXPORTER_OTLP_ENDPOINT``; both export to a local OTLP sink in
               this process that counts the spans and discards them;
* baseline  -- the baseline commit's tree (a ``git worktree`` of ``REF``, default the
               commit before the tracing commits, ``e4a0cfa~1``), untraced: the code
               path as it was.

Workload per driver: S sessions at once, each running T tasks one after another (start
to outcome), after a warm-up of S tasks. Reported per mode, as the median over the
rounds (modes interleaved, rotating order, so drift hits them alike): throughput, the
per-task latency p50/p95 (start_task to outcome), the caller's and the worker's CPU per
task (Linux /proc), and for ``on`` the spans exported per task. Ratios ``on/off`` and
``baseline/off`` are of figures from the same run. Then the cost of the check every
untraced path makes (``wire.tracing_context.active()``), per call, in this process.

Every outcome is counted; a task that did not complete is a failure (exit 1). Nothing
here asserts timings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
MODES = ("off", "on", "baseline")
DEFAULT_BASELINE = "e4a0cfa~1"
"""The commit before tracing was added (``e4a0cfa`` is its first commit)."""


# -- the driver (one per mode and round, in a process of its own) ----------------------


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _install_caller_tracing() -> Any:
    """What an application does to trace its harness: install the SDK."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "bench-caller"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


async def _drive(config: dict[str, Any]) -> dict[str, Any]:
    from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput

    import harness
    from harness import CeleryHarness
    from tooling.worker_process import WorkerProcess
    from wire.settings import Settings

    provider = _install_caller_tracing() if config["mode"] == "on" else None
    suffix = uuid4().hex[:8]
    settings = Settings(
        redis_url=config["redis_url"],
        namespace=f"bench-tracing-{suffix}",
        queue=f"bench.tracing.{suffix}",
        profile="scripted",
    )
    extra_env = dict(config["worker_env"])
    worker = WorkerProcess(
        settings,
        concurrency=max(8, config["sessions"] * 2),
        pool="threads",
        extra_env=extra_env,
        loglevel="warning",
        name=f"bench-tracing-{config['mode']}",
    )
    failures: list[str] = []
    latencies: list[float] = []
    worker.start()
    try:
        async with CeleryHarness(settings) as caller:

            async def session_run(tasks: int, record: bool) -> None:
                session = await caller.create_session(SessionSpec())
                try:
                    for turn in range(tasks):
                        began = time.perf_counter()
                        task = await session.start_task(TaskRequest(TextInput(f"turn {turn}")))
                        outcome = await task.await_outcome()
                        if record:
                            latencies.append(time.perf_counter() - began)
                        if not isinstance(outcome, Completed):
                            failures.append(type(outcome).__name__)
                finally:
                    await session.release()

            await asyncio.gather(*(session_run(1, False) for _ in range(config["sessions"])))
            assert worker.pid is not None
            worker_cpu, caller_cpu = _proc_cpu(worker.pid), time.process_time()
            began = time.perf_counter()
            await asyncio.gather(
                *(session_run(config["tasks"], True) for _ in range(config["sessions"]))
            )
            wall = time.perf_counter() - began
            worker_cpu = _proc_cpu(worker.pid) - worker_cpu
            caller_cpu = time.process_time() - caller_cpu
    finally:
        if provider is not None:
            provider.force_flush()
        worker.stop()
    tasks = len(latencies)
    return {
        "mode": config["mode"],
        "harness": harness.__file__,
        "tasks": tasks,
        "all_tasks": tasks + config["sessions"],
        "failures": failures,
        "wall": wall,
        "latencies": latencies,
        "caller_cpu": caller_cpu,
        "worker_cpu": worker_cpu,
    }


def drive(raw: str) -> None:
    config = json.loads(raw)
    tree = config["tree"]
    sys.path.insert(0, tree)
    os.chdir(tree)
    result = asyncio.run(_drive(config))
    result["harness"] = str(Path(result["harness"]).resolve().parents[1])
    print("RESULT " + json.dumps(result), flush=True)


# -- the orchestrator -------------------------------------------------------------------


class SpanSink:
    """An OTLP/HTTP trace endpoint that counts the spans it receives and drops them."""

    def __init__(self) -> None:
        self.spans = 0
        self._lock = threading.Lock()
        # Imported here: the drivers this file also runs as never import protobuf.
        from bench.otlp_sink import OtlpHttpSink

        self._sink = OtlpHttpSink(self._count)

    def _count(self, request: Any) -> None:
        count = sum(
            len(scope.spans)
            for resource in request.resource_spans
            for scope in resource.scope_spans
        )
        with self._lock:
            self.spans += count

    @property
    def endpoint(self) -> str:
        return self._sink.endpoint

    def taken(self) -> int:
        with self._lock:
            count, self.spans = self.spans, 0
        return count

    def close(self) -> None:
        self._sink.close()


@contextlib.contextmanager
def baseline_tree(ref: str) -> Iterator[Path]:
    """A detached ``git worktree`` of ``ref``, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="ahp-baseline-")) / "tree"
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(path), ref],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(path)],
            cwd=ROOT, check=False, capture_output=True,
        )  # fmt: skip
        shutil.rmtree(path.parent, ignore_errors=True)


def run_driver(config: dict[str, Any], env_extra: dict[str, str]) -> dict[str, Any]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.pop("PYTHONPATH", None)
    env.update(env_extra)
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--drive", json.dumps(config)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
            return result
    raise RuntimeError(f"the {config['mode']} driver failed:\n{done.stdout}\n{done.stderr}")


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def check_cost(calls: int = 1_000_000) -> float:
    """Nanoseconds per call of the check an untraced path makes, in this process (where
    no tracer provider is installed)."""
    from wire.tracing_context import active

    assert not active()
    began = time.perf_counter_ns()
    for _ in range(calls):
        active()
    return (time.perf_counter_ns() - began) / calls


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 5 x 10 tasks")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=20, help="tasks per session")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default=DEFAULT_BASELINE)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--redis-url")
    args = parser.parse_args(argv)
    if args.drive:
        drive(args.drive)
        return 0
    if args.quick:
        args.sessions, args.tasks, args.rounds = 5, 10, 2
    modes = [mode for mode in MODES if not (mode == "baseline" and args.no_baseline)]

    from bench.results_page import printed_into_section
    from tooling.embedded_redis import EmbeddedRedis

    with contextlib.ExitStack() as stack:
        redis_url = args.redis_url or stack.enter_context(EmbeddedRedis()).url
        sink = SpanSink()
        stack.callback(sink.close)
        trees = {"off": ROOT, "on": ROOT}
        if "baseline" in modes:
            trees["baseline"] = stack.enter_context(baseline_tree(args.baseline))
        results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
        failed = False
        with printed_into_section("tracing_cost.py", argv):
            print(
                f"{args.rounds} rounds x {args.sessions} sessions x {args.tasks} tasks per "
                f"mode; one worker process (threads pool); baseline {args.baseline}"
            )
            for round_number in range(args.rounds):
                order = modes[round_number % len(modes) :] + modes[: round_number % len(modes)]
                for mode in order:
                    traced = mode == "on"
                    otel = {
                        "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
                        "OTEL_SERVICE_NAME": f"bench-{mode}",
                    }
                    config = {
                        "mode": mode,
                        "tree": str(trees[mode]),
                        "redis_url": redis_url,
                        "sessions": args.sessions,
                        "tasks": args.tasks,
                        "worker_env": otel if traced else {},
                    }
                    sink.taken()
                    result = run_driver(config, otel if traced else {})
                    time.sleep(0.5)  # the worker's last export
                    result["spans"] = sink.taken()
                    if result["failures"]:
                        failed = True
                        print(f"  {mode}: {len(result['failures'])} tasks did not complete")
                    results[mode].append(result)
            report(results)
            print(f"\nthe untraced check (active()): {check_cost():.0f} ns per call")
        return 1 if failed else 0


def report(results: dict[str, list[dict[str, Any]]]) -> None:
    rows: dict[str, dict[str, float]] = {}
    for mode, runs in results.items():
        rows[mode] = {
            "throughput": statistics.median(run["tasks"] / run["wall"] for run in runs),
            "p50": statistics.median(percentile(run["latencies"], 0.5) for run in runs),
            "p95": statistics.median(percentile(run["latencies"], 0.95) for run in runs),
            "caller": statistics.median(run["caller_cpu"] / run["tasks"] for run in runs),
            "worker": statistics.median(run["worker_cpu"] / run["tasks"] for run in runs),
            "spans": statistics.median(run["spans"] / run["all_tasks"] for run in runs),
        }
        trees = {run["harness"] for run in runs}
        print(f"  {mode}: code from {', '.join(sorted(trees))}")
    print()
    print("| mode | tasks/s | latency p50 | p95 | caller CPU/task | worker CPU/task | spans/task |")
    print("|---|---|---|---|---|---|---|")
    for mode, row in rows.items():
        print(
            f"| {mode} | {row['throughput']:.1f} | {row['p50'] * 1000:.1f} ms | "
            f"{row['p95'] * 1000:.1f} ms | {row['caller'] * 1000:.2f} ms | "
            f"{row['worker'] * 1000:.2f} ms | {row['spans']:.1f} |"
        )
    print()
    off = rows["off"]
    for mode in [mode for mode in rows if mode != "off"]:
        row = rows[mode]
        print(
            f"{mode}/off: throughput {row['throughput'] / off['throughput']:.3f}, "
            f"latency p50 {row['p50'] / off['p50']:.3f}, p95 {row['p95'] / off['p95']:.3f}, "
            f"caller CPU {row['caller'] / off['caller']:.3f}, "
            f"worker CPU {row['worker'] / off['worker']:.3f}"
        )


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))  # after a driver's tree (see drive)
    raise SystemExit(main(sys.argv[1:]))
