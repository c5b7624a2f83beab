"""Celery names and configuration shared by the producer (caller) and the workers."""

from __future__ import annotations

from typing import Any

from .settings import Settings

RUN_TASK = "ahp.run_task"

START_PRIORITY = 3
"""Priority of a new task's run message. kombu's Redis transport serves priority 0 first
(its BRPOP lists the priority-0 list before the others), so new work waits behind
recovered work."""
RESUME_PRIORITY = 0
"""Priority of a run message the sweeper publishes again: a lost task resumes before
the backlog of new tasks."""


def celery_config(settings: Settings) -> dict[str, Any]:
    """Only JSON on the wire, late acknowledgement, one message prefetched per process."""
    visibility = int(settings.visibility_timeout.total_seconds())
    return {
        "broker_url": settings.effective_broker_url,
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "event_serializer": "json",
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,
        "worker_prefetch_multiplier": 1,
        # Flower sees received/started/succeeded from the workers; a "sent" event would
        # cost every publish an extra round trip.
        "task_send_sent_event": False,
        "worker_send_task_events": True,
        "task_default_queue": settings.queue,
        "task_routes": {RUN_TASK: {"queue": settings.queue}},
        "broker_transport_options": {"visibility_timeout": visibility},
        # A worker outlives a broker restart: it keeps reconnecting (forever, with
        # Celery's backoff) at startup and after losing the connection, and the runs in
        # progress go on meanwhile. They renew their session leases in Redis, and a
        # message handed out again after the loss finds the task running (claim: busy)
        # or settled (claim: terminal), so it never starts a second run. Celery warns
        # (CPendingDeprecationWarning, in the worker) on every connection loss that
        # this default of 5.x changes in 6.0; set explicitly, it stays False.
        "broker_connection_retry_on_startup": True,
        "broker_connection_retry": True,
        "broker_connection_max_retries": None,
        # A Redis error reply to kombu's own commands (an ``OutOfMemoryError`` at
        # ``maxmemory`` with ``noeviction``, refusing the bookkeeping of a delivery) is a
        # channel error: the consumer restarts (with the worker's backoff, see
        # ``workers.intake``) instead of the worker exiting.
        "broker_channel_error_retry": True,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "task_publish_retry": False,
        "worker_hijack_root_logger": False,
    }
