"""Run a Celery worker of a deployment as a separate OS process, and wait until it serves.

The child is ``python -m celery -A workers.main worker``: it reads its settings from the
environment, so :func:`settings_environment` writes *every* ``Settings`` field into it
explicitly (a value inherited from the caller's environment never leaks in), and the
project root is put on ``PYTHONPATH`` so profile registries outside the installed
packages (``tests.support.profiles:PROFILES``) import in the child.

The worker runs in its own process group (a new session): a Ctrl-C in the terminal does
not reach it, :meth:`WorkerProcess.stop` shuts it down warmly, and
:meth:`WorkerProcess.kill` destroys the whole group (main process and pool children) at
once, like a lost machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Literal
from uuid import uuid4

from celery import Celery

from wire.celery_config import celery_config
from wire.settings import Settings

from .errors import WorkerProcessError

__all__ = [
    "PROBE_CLIENT_NAME",
    "PROJECT_ROOT",
    "Pool",
    "WorkerProcess",
    "WorkerProcessError",
    "child_environment",
    "process_group_alive",
    "settings_environment",
]

Pool = Literal["prefork", "solo", "threads"]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The directory holding ``harness/``, ``workers/`` and ``wire/`` (and ``tests/``)."""

PROBE_CLIENT_NAME = "ahp-worker-probe"
"""The client name of the connections that ping a starting worker (``CLIENT LIST`` tells
them from the caller's)."""


def _env_value(value: object) -> str:
    if isinstance(value, timedelta):
        # Plain "3" does not parse as a duration from the environment; ISO 8601 seconds does.
        micros = value // timedelta(microseconds=1)
        if micros < 0:
            raise ValueError(f"negative duration {value!r} cannot be passed to a worker")
        seconds, fraction = divmod(micros, 1_000_000)
        return f"PT{seconds}.{fraction:06d}S" if fraction else f"PT{seconds}S"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def settings_environment(settings: Settings) -> dict[str, str | None]:
    """``AHP_<FIELD>`` for every settings field; ``None`` means "remove from the environment"
    (the field is unset, e.g. ``broker_url`` defaulting to ``redis_url``)."""
    env: dict[str, str | None] = {"REDIS_URL": None}  # AHP_REDIS_URL is the one that counts
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        env[f"AHP_{name.upper()}"] = None if value is None else _env_value(value)
    return env


def process_group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` can still run (zombies do not count).

    Killed pool children are reaped by whoever inherited them, possibly late; until then
    they exist as zombies, which ``os.killpg(pgid, 0)`` still reports.
    """
    proc = Path("/proc")
    if not proc.is_dir():  # no procfs: zombies count as alive
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in {"Z", "X"}:
            return True
    return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _destroy(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGKILL the whole process group, reap the main process, and wait (bounded) until no
    process of the group can run any more."""
    _signal_group(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + timeout
    while process_group_alive(process.pid) and time.monotonic() < deadline:
        _signal_group(process.pid, signal.SIGKILL)
        time.sleep(0.01)


def child_environment(settings: Settings) -> dict[str, str]:
    """This process's environment with ``settings`` in it (unset fields removed) and the
    project on ``PYTHONPATH``: what a child process of the deployment (a worker, Flower)
    starts with."""
    env = dict(os.environ)
    for key, value in settings_environment(settings).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    paths = [str(PROJECT_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


class WorkerProcess:
    """One ``celery worker`` OS process serving ``queues``; a context manager.

    Args:
        settings: The deployment the worker serves (every field goes into its environment).
        concurrency: Pool size (``-c``): runs the process carries at once. Default: the
            deployment's ``worker_runs`` (threads pool) or ``worker_concurrency`` (prefork).
        pool: ``threads`` (every run on the process's one loop: the deployment's layout),
            ``prefork`` (one run per child) or ``solo`` (``-P``).
        extra_env: Added to (and overriding) the child's environment.
        loglevel: The worker's ``--loglevel``.
        log_path: Where the worker's stdout and stderr go; default a new file in the
            temporary directory, kept after ``stop()`` for inspection.
        name: Node name prefix; the node is ``<name>-<hex>@<host>``.
        queues: The broker queues it consumes (``-Q``); default ``settings.queue``.
    """

    def __init__(
        self,
        settings: Settings,
        concurrency: int | None = None,
        pool: Pool = "threads",
        extra_env: dict[str, str] | None = None,
        *,
        loglevel: str = "info",
        log_path: Path | None = None,
        name: str = "ahp-worker",
        queues: Sequence[str] = (),
    ) -> None:
        self.settings = settings
        self.queues = tuple(queues) or (settings.queue,)
        if concurrency is None:
            concurrency = settings.worker_concurrency if pool == "prefork" else settings.worker_runs
        self.concurrency = concurrency
        self.pool = pool
        self.loglevel = loglevel
        self.hostname = f"{name}-{uuid4().hex[:8]}@{socket.gethostname()}"
        if log_path is None:
            handle, raw = tempfile.mkstemp(prefix=f"{name}-", suffix=".log")
            os.close(handle)
            log_path = Path(raw)
        self._log_path = log_path
        self._extra_env = dict(extra_env or {})
        self._process: subprocess.Popen[bytes] | None = None
        self._exited: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[..., WorkerProcess] | None = None
        self._log_offset = 0

    # -- what the child gets -----------------------------------------------------------
    @property
    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "celery", "-A", "workers.main", "worker",
            "-Q", ",".join(self.queues), "-c", str(self.concurrency), "-P", self.pool,
            "-n", self.hostname, "--loglevel", self.loglevel,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        """The child's complete environment."""
        env = child_environment(self.settings)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self._extra_env)
        return env

    # -- state ---------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The worker's main process id while it runs (also its process group id)."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit code once the worker ended (also after ``stop()``/``kill()``), else ``None``."""
        process = self._process or self._exited
        return None if process is None else process.poll()

    @property
    def log_path(self) -> Path:
        return self._log_path

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines this worker wrote since its latest start."""
        try:
            with self._log_path.open("rb") as log:
                log.seek(self._log_offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        """Spawn the worker and wait until it answers a Celery ping.

        Raises:
            WorkerProcessError: it exited or did not answer within ``timeout``; the
                process group is killed and the message carries the log tail.
        """
        if self.running:
            raise WorkerProcessError(self.hostname, f"worker {self.hostname} is already running")
        with self._log_path.open("ab") as log:
            self._log_offset = log.tell()
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,
            )
        self._finalizer = weakref.finalize(self, _destroy, self._process)
        try:
            problem = self._wait_ready(timeout.total_seconds())
        except BaseException:
            self.kill()
            raise
        if problem is not None:
            self.kill()
            raise WorkerProcessError(
                self.hostname,
                f"worker {self.hostname} {problem}; log {self._log_path}:\n{self.log_tail()}",
            )

    def _wait_ready(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        client = Celery("ahp-worker-probe", set_as_current=False)
        config = celery_config(self.settings)
        config["broker_transport_options"] = {
            **config["broker_transport_options"],
            "client_name": PROBE_CLIENT_NAME,
        }
        client.conf.update(config)
        client.conf.broker_connection_timeout = 1.0
        last_error = ""
        try:
            while time.monotonic() < deadline:
                if not self.running:
                    return f"exited with code {self.returncode} during startup"
                try:
                    with client.connection_for_write() as connection:
                        connection.ensure_connection(max_retries=1, interval_start=0.1, timeout=1)
                        replies = client.control.ping(
                            destination=[self.hostname], timeout=0.5, connection=connection
                        )
                except Exception as error:  # broker not reachable yet: keep polling
                    last_error = f" (last probe error: {type(error).__name__}: {error})"
                    time.sleep(0.2)
                    continue
                if any(self.hostname in reply for reply in replies):
                    return None
            return f"did not answer a ping within {timeout:g} s{last_error}"
        finally:
            client.close()

    def stop(self, timeout: timedelta = timedelta(seconds=30)) -> int | None:
        """Warm shutdown (SIGTERM: running tasks finish), SIGKILL of the group after
        ``timeout``; leftover pool children are killed. Idempotent; returns the exit code."""
        process = self._forget()
        if process is None:
            return None
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout.total_seconds())
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
            except BaseException:  # interrupted while waiting: leave nothing behind
                _destroy(process)
                raise
        code = process.wait()
        _destroy(process)  # pool children left behind, if any
        return code

    def kill(self) -> None:
        """SIGKILL the main process and its pool children at once, no shutdown. Idempotent."""
        process = self._forget()
        if process is not None:
            _destroy(process)

    def _forget(self) -> subprocess.Popen[bytes] | None:
        process, self._process = self._process, None
        if process is not None:
            self._exited = process
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        return process

    def __enter__(self) -> WorkerProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
