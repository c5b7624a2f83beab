"""A worker node: the ``celery worker`` processes one ``ahp-celery worker`` starts.

Each process carries up to ``AHP_WORKER_RUNS`` runs on its one event loop (Celery's
``threads`` pool of that size: every delivery parks a pool thread on the loop), so a
node carries ``processes x runs``. One process is one ``celery worker`` command, so
with one process the command replaces ``ahp-celery`` (``exec``: signals reach Celery
directly). With several, this module supervises them:

- each gets its own node name (``<name><i>@<host>``), so Flower and remote control tell
  them apart;
- SIGTERM, SIGINT and SIGQUIT are passed to every process (SIGTERM: each hands its runs
  back and exits warm), and the node exits once all have, with the first non-zero code;
- a process that dies while the node is not stopping (killed, out of memory) is started
  again after a pause, and its runs are recovered by the sweepers as after any loss;
  one that keeps dying at startup stops the node (exit 1), so the orchestrator sees it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

RESTART_PAUSE = 1.0
"""Seconds before a process that died is started again."""
STARTUP = 10.0
"""A process that dies within this many seconds of its start died at startup."""
STARTUP_FAILURES = 3
"""Consecutive deaths at startup that stop the node."""


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """What one node runs: ``processes`` Celery workers of ``pool`` with ``concurrency``,
    each consuming ``queues``."""

    queues: tuple[str, ...]
    pool: str
    concurrency: int
    processes: int
    loglevel: str = "info"
    hostname: str | None = None

    def command(self, index: int | None = None) -> list[str]:
        args = [sys.executable, "-m", "celery", "-A", "workers.main", "worker"]
        args += ["-Q", ",".join(self.queues), "-c", str(self.concurrency), "-P", self.pool]
        args += ["-E"]
        args += ["--loglevel", self.loglevel]
        name = self.hostname
        if index is not None:
            name = _numbered(name or "worker@%h", index)
        if name is not None:
            args += ["--hostname", name]
        return args


def _numbered(hostname: str, index: int) -> str:
    name, at, host = hostname.partition("@")
    return f"{name}{index}@{host}" if at else f"{name}{index}"


def run_node(layout: NodeLayout) -> int:
    """Run the node until its processes have exited; the exit code."""
    if layout.processes == 1:
        sys.stdout.flush()
        os.execv(sys.executable, layout.command())
    return _Supervisor(layout).serve()


class _Supervisor:
    def __init__(self, layout: NodeLayout) -> None:
        self._layout = layout
        self._stopping = threading.Event()
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._started: dict[int, float] = {}
        self._failures: dict[int, int] = {}
        self._code = 0

    def serve(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(signum, self._forward)
        for index in range(1, self._layout.processes + 1):
            self._spawn(index)
        while self._children:
            for index, child in tuple(self._children.items()):
                code = child.poll()
                if code is None:
                    continue
                del self._children[index]
                self._exited(index, code)
            time.sleep(0.2)
        return self._code

    def _spawn(self, index: int) -> None:
        # Its own session: a Ctrl-C reaches the node only, which passes it on once.
        self._children[index] = subprocess.Popen(
            self._layout.command(index), start_new_session=True
        )
        self._started[index] = time.monotonic()

    def _exited(self, index: int, code: int) -> None:
        if self._stopping.is_set():
            if code != 0 and self._code == 0:
                self._code = code if code > 0 else 128 - code
            return
        quick = time.monotonic() - self._started[index] < STARTUP
        self._failures[index] = self._failures.get(index, 0) + 1 if quick else 0
        print(
            f"ahp-celery worker: process {index} exited with code {code}",
            file=sys.stderr,
            flush=True,
        )
        if self._failures[index] >= STARTUP_FAILURES:
            print(
                f"ahp-celery worker: process {index} keeps dying at startup; stopping the node",
                file=sys.stderr,
                flush=True,
            )
            self._code = 1
            self._signal_all(signal.SIGTERM)
            return
        time.sleep(RESTART_PAUSE)
        if not self._stopping.is_set():
            self._spawn(index)

    def _forward(self, signum: int, _frame: object) -> None:
        self._stopping.set()
        self._signal_all(signum)

    def _signal_all(self, signum: int) -> None:
        self._stopping.set()
        for child in tuple(self._children.values()):
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signum)


def node_commands(layout: NodeLayout) -> Sequence[list[str]]:
    """The commands the node runs, one per process (for ``--dry-run`` and tests)."""
    if layout.processes == 1:
        return [layout.command()]
    return [layout.command(index) for index in range(1, layout.processes + 1)]


__all__ = ["NodeLayout", "node_commands", "run_node"]
