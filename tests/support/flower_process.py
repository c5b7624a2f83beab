"""Flower as a separate OS process against a test deployment, as compose runs it.

``python -m celery -A workers.main flower``, configured like the workers (every settings
field in its environment, see ``tooling.worker_process.settings_environment``), with basic
authentication from ``FLOWER_BASIC_AUTH`` (the variable compose sets) and
``FLOWER_UNAUTHENTICATED_API`` removed.
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
from pathlib import Path

import httpx

from tooling.worker_process import PROJECT_ROOT, child_environment
from wire.settings import Settings


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class FlowerProcess:
    def __init__(self, settings: Settings, *, user: str, password: str) -> None:
        self.settings = settings
        self.auth = (user, password)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        handle, raw = tempfile.mkstemp(prefix="ahp-flower-", suffix=".log")
        os.close(handle)
        self.log_path = Path(raw)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "celery", "-A", "workers.main", "flower",
            "--address=127.0.0.1", f"--port={self.port}",
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        env = child_environment(self.settings)
        env.pop("FLOWER_UNAUTHENTICATED_API", None)
        env["FLOWER_BASIC_AUTH"] = ":".join(self.auth)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def start(self, within: float = 60.0) -> None:
        """Spawn Flower and wait until its HTTP server answers ``/healthcheck``."""
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                cwd=PROJECT_ROOT,
                start_new_session=True,
            )
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"flower exited with {self._process.returncode}:\n{self.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthcheck", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"flower did not answer within {within:g} s:\n{self.log_tail()}")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def __enter__(self) -> FlowerProcess:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
        self.log_path.unlink(missing_ok=True)
