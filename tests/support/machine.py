"""The machine the test processes share: tests that need its CPUs to themselves.

The suite runs on several pytest-xdist processes. A test marked ``exclusive`` asserts
what a worker process does under its own full load (say, a thousand runs on one loop
that must still renew every 2 s lease), so other test processes starting workers beside
it would turn the machine's load into its failure. Every test holds the run's machine
lock while it is set up, runs and is torn down: shared by ordinary tests, whole for an
``exclusive`` one. A turnstile in front keeps a waiting ``exclusive`` test from being
passed forever by ordinary tests that keep overlapping.

Without xdist (``-n 0``) tests run one at a time and nothing is locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

MARKER = "exclusive"


def _paths(run: str) -> tuple[Path, Path]:
    base = Path(tempfile.gettempdir()) / f"ahp-tests-{run}"
    return base.with_suffix(".turnstile"), base.with_suffix(".lock")


def run_id() -> str | None:
    """The id of this pytest-xdist run, shared by its processes (``None`` without xdist)."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID")


@contextlib.contextmanager
def machine_share(run: str, *, exclusive: bool) -> Iterator[None]:
    """Hold the run's machine lock: whole with ``exclusive``, else shared."""
    turnstile_path, lock_path = _paths(run)
    with turnstile_path.open("a") as turnstile, lock_path.open("a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if exclusive:
            # Kept while waiting and running: no ordinary test starts meanwhile.
            fcntl.flock(lock, fcntl.LOCK_EX)
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_SH)
        yield  # both closed (and so unlocked) on the way out


def remove_lock_files(run: str) -> None:
    for path in _paths(run):
        path.unlink(missing_ok=True)
