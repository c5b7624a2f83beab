"""A worker's publish of a task's run message on the queue its record names (a hand-back,
a lost worker, a start taken and never claimed, a promoted or admitted start), never on
the queue of the worker that publishes it.

A message published again for a run already under way (``RESUME_PRIORITY``) goes ahead of
new starts; a start a worker publishes for someone (a session's promoted task, a
tenant's admitted parked task) waits its turn with the other starts (``START_PRIORITY``):
else each of a tenant's tasks admitted as another of its tasks ends would overtake every
other tenant's start (docs/tenants.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from opentelemetry import context as otel_context
from opentelemetry.context import Context

from wire.celery_config import RESUME_PRIORITY
from wire.message_spans import publishing
from wire.store import RecordStore
from wire.tracing_context import active, stored_context

Republish = Callable[[str, str, str, int], None]
"""Publishes a run message (blocking): ``republish(task_id, session_id, queue, priority)``."""


def on_its_queue(
    publish: Republish,
    store: RecordStore,
    default_queue: str,
    priority: int = RESUME_PRIORITY,
) -> Callable[[str, str], Awaitable[None]]:
    """Publish a task's run on the queue its record names (the queue it was started on;
    ``default_queue`` for a record older than that field) with ``priority``, in a
    thread: Celery's publish blocks, and must stay off the worker's event loop. While
    tracing, the message continues the task's trace (the record's ``trace``) in a
    ``publish <queue>`` span."""

    async def publish_on_its_queue(task_id: str, session_id: str) -> None:
        if not active():
            queue = await store.task_queue(task_id) or default_queue
            await asyncio.to_thread(publish, task_id, session_id, queue, priority)
            return
        # Tracing: in the task's own trace (its record's), never the current run's (a
        # promotion is published by the run that settled the task ahead of it).
        recorded, trace_field = await store.task_route(task_id)
        queue = recorded or default_queue
        token = otel_context.attach(stored_context(trace_field) or Context())
        try:
            with publishing(queue, task_id):
                # The thread runs in a copy of this context: the message carries it.
                await asyncio.to_thread(publish, task_id, session_id, queue, priority)
        finally:
            otel_context.detach(token)

    return publish_on_its_queue


__all__ = ["Republish", "on_its_queue"]
