"""Signal handling of the foreground commands: Ctrl-C and SIGTERM, and their children."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["children_ignore_ctrl_c", "sigterm_interrupts"]


def sigterm_interrupts() -> None:
    """Treat SIGTERM like Ctrl-C (asyncio cancels the main task; ``finally`` cleans up)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    signal.signal(signal.SIGTERM, interrupt)


@contextmanager
def children_ignore_ctrl_c() -> Iterator[None]:
    """Processes spawned inside start with SIGINT blocked: a Ctrl-C in the terminal hits the
    whole process group, but Redis must stay up until this process stops it (SIGTERM)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
