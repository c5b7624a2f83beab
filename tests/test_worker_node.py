"""``ahp-celery worker``: a node of threads-pool processes, each carrying many runs.

The commands a node runs are read from ``--dry-run``; a real node of two processes is
started as ``ahp-celery worker --processes 2`` and observed through Celery pings (each
process by its node name) and the operating system (its pids), never through its own
report.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from celery import Celery

from tooling.worker_process import PROJECT_ROOT, child_environment
from wire.celery_config import celery_config
from wire.settings import Settings

from .support.deployments import own_deployment

pytestmark = pytest.mark.processes


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tooling.cli", *args],
        cwd=PROJECT_ROOT,
        env=child_environment(settings),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_node_runs_threads_pool_processes_of_the_configured_size(redis_url: str) -> None:
    settings = own_deployment(redis_url, "node-dry", worker_runs=321, worker_processes=3)
    result = _cli(settings, "worker", "--dry-run", "--hostname", "edge@%h")
    assert result.returncode == 0, result.stderr
    commands = [line.split() for line in result.stdout.splitlines() if line.strip()]
    assert len(commands) == 3
    for index, command in enumerate(commands, start=1):
        assert command[command.index("-P") + 1] == "threads"
        assert command[command.index("-c") + 1] == "321"
        assert command[command.index("-Q") + 1] == settings.queue
        assert command[command.index("--hostname") + 1] == f"edge{index}@%h"
    legacy = _cli(settings, "worker", "--dry-run", "--pool", "prefork", "--processes", "1")
    (command,) = [line.split() for line in legacy.stdout.splitlines() if line.strip()]
    assert command[command.index("-P") + 1] == "prefork"
    assert command[command.index("-c") + 1] == str(settings.worker_concurrency)


def test_a_node_refuses_a_process_count_below_one(redis_url: str) -> None:
    settings = own_deployment(redis_url, "node-refuse")
    result = _cli(settings, "worker", "--dry-run", "--processes", "0")
    assert result.returncode == 2
    assert "--processes" in result.stderr


def _pings(settings: Settings, names: list[str]) -> dict[str, int]:
    """The pid each named node process answers with (absent: no answer)."""
    client = Celery("node-probe", set_as_current=False)
    client.conf.update(celery_config(settings))
    try:
        replies = client.control.ping(destination=names, timeout=1.0)
        found: dict[str, int] = {}
        for reply in replies:
            for name in reply:
                stats = client.control.inspect(destination=[name], timeout=1.0).stats() or {}
                pid = stats.get(name, {}).get("pid")
                if pid is not None:
                    found[name] = int(pid)
        return found
    finally:
        client.close()


def _until_all_answer(settings: Settings, names: list[str], within: float = 90) -> dict[str, int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = _pings(settings, names)
        if len(found) == len(names):
            return found
        time.sleep(0.5)
    raise AssertionError(f"not every node process answered: {names}")


@pytest.fixture
def node(redis_url: str) -> Iterator[tuple[Settings, subprocess.Popen[bytes]]]:
    settings = own_deployment(redis_url, "node", worker_runs=50)
    process = subprocess.Popen(
        [sys.executable, "-m", "tooling.cli", "worker", "--processes", "2", "-n", "nd@%h"],
        cwd=PROJECT_ROOT,
        env=child_environment(settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield settings, process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_a_node_restarts_a_dead_process_and_ends_warm_on_sigterm(
    node: tuple[Settings, subprocess.Popen[bytes]],
) -> None:
    settings, process = node
    host = os.uname().nodename
    names = [f"nd1@{host}", f"nd2@{host}"]
    first = _until_all_answer(settings, names)
    # A process killed under the node (out of memory, say) is started again.
    os.kill(first[names[0]], signal.SIGKILL)
    time.sleep(2)
    again = _until_all_answer(settings, names)
    assert again[names[0]] != first[names[0]]
    assert again[names[1]] == first[names[1]]
    assert process.poll() is None
    # SIGTERM to the node reaches both processes; each ends warm, then the node.
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    for pid in again.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
