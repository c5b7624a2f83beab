#!/usr/bin/env python
"""What the HTTP API costs over the Python harness, measured side by side in one run.

    python bench/http_vs_harness.py [--quick]

One embedded Redis 8, two ``celery worker`` OS processes (prefork ``-c 1``), and the API
served by uvicorn in its own process (``ahp-celery api``), all started here. Both paths
run the same deterministic chat model (profile ``scripted``) on the same workers:

* harness      -- ``CeleryHarness`` in this process: ``create_session`` + ``start_task``
                  + ``await_outcome`` (the session is released untimed);
* harness-stream -- the same, the caller following ``task.events()`` to the terminal
                  event before the outcome (what a streaming HTTP client receives);
* http-stream  -- the same flow over HTTP with ``aiohttp``: the session and its first task
                  in one request, ``POST /v1/tasks/stream`` with ``on_completion: keep``,
                  whose answer is the task's Server-Sent Events until the terminal one;
                  the session's later tasks (throughput) ``POST
                  /v1/sessions/{id}/tasks/stream`` (LangGraph's Agent Server: ``POST
                  /threads/{id}/runs/stream``);
* http-wait    -- ``POST /v1/tasks?wait=`` with ``on_completion: keep``, which answers with
                  the outcome; later tasks ``POST /v1/sessions/{id}/tasks?wait=``;
* http-stream-2req, http-wait-2req -- the same with the session created by a request of
                  its own first, ``POST /v1/sessions`` (LangGraph: ``POST /threads`` +
                  ``POST /threads/{id}/runs/stream``); latency only, reported without a
                  target: the second request is a round trip the harness path does not make;
* harness-run  -- ``create_session(single_task=True)`` + ``start_task`` +
                  ``await_outcome``: a session that ends with its task;
* harness-run-stream -- the same, following ``task.events()`` to the end;
* http-run-stream -- the same in one request, ``POST /v1/tasks/stream`` ("create, run and
                  stream" as LangGraph's stateless ``POST /runs/stream``);
* http-run-wait -- ``POST /v1/tasks?wait=`` (LangGraph's ``POST /runs/wait``);
* http-round-trip -- ``GET /healthz`` alone (latency only): one request's floor, no
                  harness work behind it.
* sdk-stream, sdk-run-stream -- the LangGraph dialect through ``langgraph-sdk``:
                  ``client.runs.stream`` on a thread (created with its first run, or ahead
                  for the chains) and stateless; lg-stream, lg-run-stream -- the same
                  requests through aiohttp, the API's cost without httpx's
                  (``bench/http_sdk_flows.py``).

The flows are in ``bench/http_paths.py`` and ``bench/http_sdk_flows.py``, the scenarios
and the API process in ``bench/http_rig.py``.

Each HTTP flow is compared with the harness flow that does the same work in the caller's
process: the streaming flows with the caller following every event, the waiting flows with
the caller awaiting the outcome; the two-request flows in plain sessions, the one-request
runs in single-task sessions.

Scenarios:
 (a) latency: fresh-session tasks one at a time, samples of the paths interleaved
     (rotating order); median and p95 per path, ratio to its harness flow.
 (b) throughput: S chains of T sequential tasks, all chains concurrently, per path (a
     session per chain; for the runs, a session per task); tasks/s and ratio to its
     harness flow.

Every outcome is counted and must be Completed with the scripted reply; a run with
failures exits non-zero. Nothing here asserts timings: the targets block only reports.
The LangGraph Agent Server figures (about 1 s per run, poll-bound, and 34 runs/s on its
dev server) are quoted from the issue, not measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from bench import http_sdk_flows as sdk  # noqa: E402
from bench.http_paths import PROMPT, TENANT, HarnessPath, HttpPath, RoundTripPath  # noqa: E402
from bench.http_rig import (  # noqa: E402
    FAILURES,
    ApiServer,
    FlowPath,
    Plan,
    Quiet,
    Throughput,
    api_env,
    free_port,
    percentile,
    report_failures,
    scenario_latency,
    scenario_throughput,
)
from bench.results_page import RESULTS_PAGE, printed_into_section  # noqa: E402
from harness import CeleryHarness  # noqa: E402
from tooling.embedded_redis import EmbeddedRedis  # noqa: E402
from tooling.worker_process import WorkerProcess  # noqa: E402
from wire.keys import Keys  # noqa: E402
from wire.settings import Settings  # noqa: E402

TOKEN = "bench-" + uuid4().hex
LANGGRAPH_SERVER_RUN_S = 1.0
LANGGRAPH_SERVER_RUNS_PER_S = 34.0


BASELINE = {
    "http-stream": "harness-stream",
    "http-wait": "harness",
    "http-run-stream": "harness-run-stream",
    "http-run-wait": "harness-run",
    **sdk.BASELINE,
}
"""Each HTTP flow's harness flow: the same work in the caller's process (the same
sessions, and every event delivered to the caller for the streaming flows)."""
TWO_REQUESTS = {"http-stream-2req": "harness-stream", "http-wait-2req": "harness"}
"""Latency only, no target: the flows above with the session created by a request of its
own, a round trip more than the harness path makes."""


def _print_round(name: str, result: Throughput) -> None:
    cpu = "  ".join(f"{group} {ms:4.1f}" for group, ms in result.cpu_ms.items())
    calls = "  ".join(f"{command} {n:.1f}" for command, n in result.redis_calls.items())
    total = sum(result.redis_calls.values())
    switches = "  ".join(f"{group} {n:.1f}" for group, n in result.switches.items())
    print(f"  round {name:12} {result.rate:7.1f} tasks/s   CPU ms/task: {cpu}", flush=True)
    print(f"        preemptions/task: {switches}", flush=True)
    print(f"        Redis commands/task {total:.1f}: {calls}", flush=True)


async def run(plan: Plan, log_dir: Path, show_rounds: bool = False) -> int:
    with EmbeddedRedis() as redis_server:
        settings = Settings(
            redis_url=redis_server.url,
            namespace=f"bench-{uuid4().hex[:8]}",
            queue=f"ahp.bench.{uuid4().hex[:8]}",
            profile="scripted",
        )
        workers = [
            WorkerProcess(
                settings,
                concurrency=1,
                pool="prefork",
                loglevel="warning",
                log_path=log_dir / f"worker-{index}.log",
                name=f"{settings.namespace}-{index}",
            )
            for index in range(2)
        ]
        api = ApiServer(api_env(settings, TENANT, TOKEN), free_port(), log_dir / "api.log")
        try:
            for worker in workers:
                worker.start(timedelta(seconds=60))
            api.start()
            async with (
                CeleryHarness(settings) as harness,
                aiohttp.ClientSession(
                    api.url,
                    headers={"Authorization": f"Bearer {TOKEN}"},
                    timeout=aiohttp.ClientTimeout(total=60),
                    connector=aiohttp.TCPConnector(limit=200),
                ) as client,
                sdk.sdk_client(api.url, TOKEN) as sdk_client,
                sdk.lg_client(api.url, TOKEN) as lg_client,
            ):
                paths: list[FlowPath] = [
                    HarnessPath(harness),
                    HarnessPath(harness, stream=True),
                    HttpPath(client, stream=True),
                    HttpPath(client, stream=False),
                    HarnessPath(harness, single_task=True),
                    HarnessPath(harness, single_task=True, stream=True),
                    HttpPath(client, stream=True, run=True),
                    HttpPath(client, stream=False, run=True),
                    # The LangGraph dialect: the SDK's client, then the same requests
                    # through aiohttp (see bench/http_sdk_flows.py).
                    sdk.SdkPath(sdk_client, settings.profile, PROMPT, run=False),
                    sdk.SdkPath(sdk_client, settings.profile, PROMPT, run=True),
                    sdk.LangGraphHttpPath(lg_client, settings.profile, PROMPT, run=False),
                    sdk.LangGraphHttpPath(lg_client, settings.profile, PROMPT, run=True),
                ]
                quiet = Quiet(redis_server.url, Keys(settings.namespace))
                two_requests = [
                    HttpPath(client, stream=True, two_requests=True),
                    HttpPath(client, stream=False, two_requests=True),
                ]
                latency = await scenario_latency(
                    [*paths, *two_requests, RoundTripPath(client)], plan, quiet
                )
                groups = {
                    "bench": [os.getpid()],
                    "api": [api.pid],
                    "workers": [pid for worker in workers if (pid := worker.pid) is not None],
                    "redis": [redis_server.pid or 0],
                }
                rounds: dict[str, list[Throughput]] = {path.name: [] for path in paths}
                for _ in range(plan.rounds):
                    for path in paths:
                        result, tally = await scenario_throughput(
                            path, plan, groups, redis_server.url, quiet
                        )
                        report_failures("throughput", {path.name: tally})
                        if show_rounds:
                            _print_round(path.name, result)
                        rounds[path.name].append(result)
                await quiet.aclose()
                # Each path's median round (by rate), with its CPU figures.
                throughput = {
                    name: sorted(results, key=lambda r: r.rate)[len(results) // 2]
                    for name, results in rounds.items()
                }
        finally:
            api.stop()
            for worker in workers:
                worker.stop()
    _print(latency, throughput, plan)
    if FAILURES:
        print("\nFAILURES:", *FAILURES, sep="\n  ")
        return 1
    return 0


def _print(latency: dict[str, list[float]], throughput: dict[str, Throughput], plan: Plan) -> None:
    print(f"\nplan: {plan}; 2 worker processes (prefork -c 1), API: one uvicorn process")
    print("\n(a) fresh-session latency (create session + task to its outcome)")
    for name, values in latency.items():
        median = statistics.median(values)
        p95 = percentile(values, 0.95)
        if name == RoundTripPath.name:
            print(
                f"  {name:15} median {median * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms"
                "  (GET /healthz: one request's floor)"
            )
            continue
        base = statistics.median(latency[{**BASELINE, **TWO_REQUESTS}.get(name, name)])
        print(
            f"  {name:15} median {median * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms"
            f"  ratio {median / base:5.2f}"
            + ("  (two requests; no target)" if name in TWO_REQUESTS else "")
        )
    print(
        f"\n(b) throughput (all chains concurrently, the median of {plan.rounds} "
        "interleaved rounds)"
    )
    for name, result in throughput.items():
        cpu = "  ".join(f"{group} {ms:4.1f}" for group, ms in result.cpu_ms.items())
        base_rate = throughput[BASELINE.get(name, name)].rate
        print(
            f"  {name:15} {result.rate:7.1f} tasks/s  ratio {result.rate / base_rate:5.2f}"
            f"   CPU ms/task: {cpu}"
        )
    print("\ntargets (reported, not asserted), each HTTP flow against its harness flow")
    for name, baseline in BASELINE.items():
        added = statistics.median(latency[name]) / statistics.median(latency[baseline]) - 1
        kept = throughput[name].rate / throughput[baseline].rate
        print(
            f"  {name:15} latency added {added * 100:+5.1f} % (target <= +20 %): "
            f"{'met' if added <= 0.20 else 'NOT met'};  throughput kept {kept * 100:5.1f} % "
            f"(target >= 80 %): {'met' if kept >= 0.80 else 'NOT met'}"
            + (f"  [{sdk.CLIENT[name]}]" if name in sdk.CLIENT else "")
        )
    print(
        f"  vs the LangGraph Agent Server's create-run-and-stream (quoted, not measured here: "
        f"~{LANGGRAPH_SERVER_RUN_S:.0f} s/run, {LANGGRAPH_SERVER_RUNS_PER_S:.0f} runs/s):"
    )
    for name in ("http-stream", "http-run-stream", "sdk-stream", "sdk-run-stream"):
        median = statistics.median(latency[name])
        print(
            f"  {name:15} {LANGGRAPH_SERVER_RUN_S / median:.0f}x lower latency, "
            f"{throughput[name].rate / LANGGRAPH_SERVER_RUNS_PER_S:.1f}x the throughput"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="a short run (smoke test)")
    parser.add_argument(
        "--rounds",
        action="store_true",
        help="print every throughput round: CPU by process group and Redis commands by name",
    )
    parser.add_argument("--results-page", type=Path, default=RESULTS_PAGE)
    parser.add_argument("--no-results-page", action="store_true")
    args = parser.parse_args(argv)
    page = None if args.no_results_page else args.results_page
    given = list(argv if argv is not None else sys.argv[1:])
    with (
        tempfile.TemporaryDirectory(prefix="bench-http-") as logs,
        printed_into_section("http_vs_harness.py", given, page),
    ):
        return asyncio.run(run(Plan.of(args.quick), Path(logs), args.rounds))


__all__ = ["FAILURES", "ApiServer", "Plan", "main", "run"]


if __name__ == "__main__":
    sys.exit(main())
