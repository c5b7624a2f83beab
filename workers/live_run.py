"""A run of this worker process, as the runtime, the cancellation listener and the
runner's parts see it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass(eq=False)
class LiveRun:
    """A run of this process, reachable by the cancellation listener and the runtime."""

    task_id: str
    cancel_requested: asyncio.Event = field(default_factory=asyncio.Event)
    lease_lost: asyncio.Event = field(default_factory=asyncio.Event)
    """Shared with the run's ``SessionLease`` (``lost``)."""
    task: asyncio.Task[None] | None = None
    """The asyncio task running it: what the runtime cancels when it stops."""
    handed_back: bool = False
    """The worker is stopping and the graph run ended unsettled: the lease is handed back
    so the redelivered message resumes the task at once."""


__all__ = ["LiveRun"]
