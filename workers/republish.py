"""A worker's republish: a task's run message published again on the queue its record
names (a hand-back, a lost worker, a start taken and never claimed), never on the queue
of the worker that republishes it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from opentelemetry import context as otel_context
from opentelemetry.context import Context

from wire.message_spans import publishing
from wire.store import RecordStore
from wire.tracing_context import active, stored_context

Republish = Callable[[str, str, str], None]
"""Publishes a run message again (blocking): ``republish(task_id, session_id, queue)``."""


def on_its_queue(
    publish: Republish, store: RecordStore, default_queue: str
) -> Callable[[str, str], Awaitable[None]]:
    """Publish a task's run on the queue its record names (the queue it was started on;
    ``default_queue`` for a record older than that field), in a thread: Celery's publish
    blocks, and must stay off the worker's event loop. While tracing, the message continues
    the task's trace (the record's ``trace``) in a ``publish <queue>`` span."""

    async def publish_on_its_queue(task_id: str, session_id: str) -> None:
        if not active():
            queue = await store.task_queue(task_id) or default_queue
            await asyncio.to_thread(publish, task_id, session_id, queue)
            return
        # Tracing: in the task's own trace (its record's), never the current run's (a
        # promotion is published by the run that settled the task ahead of it).
        recorded, trace_field = await store.task_route(task_id)
        queue = recorded or default_queue
        token = otel_context.attach(stored_context(trace_field) or Context())
        try:
            with publishing(queue, task_id):
                # The thread runs in a copy of this context: the message carries it.
                await asyncio.to_thread(publish, task_id, session_id, queue)
        finally:
            otel_context.detach(token)

    return publish_on_its_queue


__all__ = ["Republish", "on_its_queue"]
