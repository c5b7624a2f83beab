"""Build the Celery app of the worker pool.

``celery -A workers.main worker`` serves the deployment configured by the environment
(see ``wire.settings.Settings``). Tests and embedders call :func:`create_app` with
explicit settings.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from celery import Celery
from celery.exceptions import Reject
from celery.signals import (
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutting_down,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wire.celery_config import RUN_TASK, celery_config
from wire.messages import RunMessage
from wire.profiles import AgentProfile
from wire.settings import Settings
from wire.tracing_context import active, carrier

from .broker_connection import WorkerAMQP
from .errors import RuntimeStoppedError
from .guarded_transport import TRANSPORT_ALIAS, guarded_transport_options
from .intake import GuardedConsumer, MessageIntake
from .preflight import refuse_without_modules
from .runtime import WorkerRuntime
from .spans import message_headers

_REPORT_SECONDS = 0.2


def create_app(settings: Settings, profiles: Mapping[str, AgentProfile] | None = None) -> Celery:
    app = Celery("ahp_workers", set_as_current=False, amqp=WorkerAMQP)
    app.conf.update(celery_config(settings))
    # Only well-formed run messages of this deployment reach Celery; the rest are
    # dropped and counted (see workers.intake and workers.guarded_transport).
    intake = MessageIntake(settings)
    app.conf.worker_consumer = GuardedConsumer
    app.ahp_intake = intake
    if urlsplit(settings.effective_broker_url).scheme == "redis":
        # Queue items that are not even kombu messages are dropped too. (Other
        # schemes, rediss:// and sentinel:// among them, keep kombu's own transport.)
        # kombu's transport is named, never given as a class: workers report it in JSON
        # (``inspect stats``, Flower's worker list).
        app.conf.broker_transport = TRANSPORT_ALIAS
        app.conf.broker_transport_options = {
            **app.conf.broker_transport_options,
            **guarded_transport_options(intake),
        }

    def republish(task_id: str, session_id: str, queue: str, priority: int) -> None:
        # Publish retry stays off: the sweeper's hold-off decides when to try again.
        # While tracing, the message carries the current span's context (the task's
        # trace: see workers.republish).
        message = RunMessage(settings.namespace, task_id, session_id)
        app.send_task(
            RUN_TASK,
            kwargs=message.kwargs(),
            task_id=task_id,
            queue=queue,
            priority=priority,
            retry=False,
            headers=(carrier() or None) if active() else None,
        )

    runtime = WorkerRuntime(settings, profiles, republish=republish)
    app.ahp_runtime = runtime

    # shared=False: Celery adds a shared task to every app created later in the process,
    # so a second deployment's app would run this one's function (and settings).
    @app.task(  # type: ignore[untyped-decorator]
        name=RUN_TASK, bind=True, acks_late=True, reject_on_worker_lost=True, shared=False
    )
    def run_task(
        self: Any, namespace: str, task_id: str, session_id: str | None = None
    ) -> dict[str, Any]:
        """Returns the AHP outcome as it stands when this delivery ends (see
        ``workers.run_summary``): Celery puts it in the ``task-succeeded`` event, which is
        how Flower tells a completed AHP task from a cancelled, failed or unresolved one."""
        if namespace != settings.namespace:
            raise ValueError(
                f"message for namespace {namespace!r} reached a worker of {settings.namespace!r}"
            )
        try:
            if not active():
                return runtime.run_task(task_id, session_id).to_json()
            request = self.request
            queue = (getattr(request, "delivery_info", None) or {}).get("routing_key")
            return runtime.run_task(
                task_id,
                session_id,
                queue=queue if isinstance(queue, str) else None,
                trace_headers=message_headers(request),
            ).to_json()
        except RuntimeStoppedError as error:
            # Shutting down mid-run: hand the message back instead of acknowledging it.
            raise Reject(str(error), requeue=True) from error
        except (RedisConnectionError, RedisTimeoutError) as error:
            # Redis went away (restarting) before the claim or during the run: hand the
            # message back. Its next delivery claims the task, finds it running under a
            # live lease (dropped; the sweeper resumes it if that run is gone) or settled.
            raise Reject(f"Redis unreachable: {error}", requeue=True) from error

    def check_server(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            refuse_without_modules(settings)
            # The queues this worker consumes (``-Q``, else the default queue), chosen
            # before ``worker_init`` and before any pool child forks: its sweeper judges
            # unclaimed starts of these queues only.
            consumed = tuple(str(name) for name in sender.app.amqp.queues.consume_from)
            if consumed:
                runtime.queues = consumed
            # What its processes report of themselves (``workers.presence``).
            runtime.node = str(getattr(sender, "hostname", "") or "") or None
            concurrency = getattr(sender, "concurrency", None)
            if isinstance(concurrency, int) and concurrency > 0:
                runtime.slots = concurrency

    def stop_then_exit() -> None:
        runtime.stop()
        time.sleep(_REPORT_SECONDS)  # let the task function report its Reject
        os.kill(os.getpid(), signal.SIGTERM)

    def hand_back_runs(signum: int, frame: Any) -> None:
        # SIGTERM reached this pool child (systemd's control-group kill, a signal to the
        # worker's process group, the pool terminating it): hand its runs back before
        # exiting instead of dying mid-run. Each run is cancelled, its lease released and
        # its record marked handed back; its task function raises RuntimeStoppedError,
        # so the message is requeued. Then the child ends as SIGTERM ends it; a second
        # SIGTERM kills at once.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        threading.Thread(target=stop_then_exit, name="ahp-hand-back", daemon=True).start()

    def start_in_child(**_: Any) -> None:
        runtime.slots = 1  # a prefork child carries one run at a time
        runtime.start()
        signal.signal(signal.SIGTERM, hand_back_runs)

    served_here: set[str] = set()
    """Node names of this app's workers whose runs live in this process (not forking)."""

    def start_if_not_forking(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        pool = getattr(sender, "pool", None)
        if pool is not None and "prefork" not in type(pool).__module__:
            runtime.start()
            served_here.add(str(getattr(sender, "hostname", "")))

    def hand_back_on_shutdown(sender: Any = None, **_: Any) -> None:
        # SIGTERM (or SIGINT) reached a worker whose runs share this process's loop (the
        # threads pool). Celery's warm shutdown would wait for every run to end, however
        # long its model streams: hand them back instead. Each run is cancelled, its lease
        # freed and its record marked handed back; its task function raises
        # RuntimeStoppedError, so its message is requeued, not acknowledged, and the
        # pool's threads end soon. Off the signal handler: stopping awaits Redis.
        if str(sender) in served_here and runtime.started:
            threading.Thread(target=runtime.stop, name="ahp-hand-back", daemon=True).start()

    def stop_child(**_: Any) -> None:
        runtime.stop()

    worker_init.connect(check_server, weak=False)
    worker_process_init.connect(start_in_child, weak=False)
    worker_process_shutdown.connect(stop_child, weak=False)
    worker_ready.connect(start_if_not_forking, weak=False)
    worker_shutting_down.connect(hand_back_on_shutdown, weak=False)
    return app
