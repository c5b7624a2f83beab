"""A worker's republish: a task's run message published again on the queue its record
names (a hand-back, a lost worker, a start taken and never claimed), never on the queue
of the worker that republishes it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from wire.store import RecordStore

Republish = Callable[[str, str, str], None]
"""Publishes a run message again (blocking): ``republish(task_id, session_id, queue)``."""


def on_its_queue(
    publish: Republish, store: RecordStore, default_queue: str
) -> Callable[[str, str], Awaitable[None]]:
    """Publish a task's run on the queue its record names (the queue it was started on;
    ``default_queue`` for a record older than that field), in a thread: Celery's publish
    blocks, and must stay off the worker's event loop."""

    async def publish_on_its_queue(task_id: str, session_id: str) -> None:
        queue = await store.task_queue(task_id) or default_queue
        await asyncio.to_thread(publish, task_id, session_id, queue)

    return publish_on_its_queue


__all__ = ["Republish", "on_its_queue"]
