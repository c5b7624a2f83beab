"""A run message exactly as Celery and kombu's Redis transport put it on the queue.

The caller publishes run messages with one ``LPUSH`` of this envelope on its own event
loop, instead of going through ``Celery.send_task`` in a thread: that path cost the
caller about a quarter of its CPU per task (argument processing, a producer, kombu's
channel) and a thread hop on every start. The envelope is the one kombu writes for
``send_task(RUN_TASK, kwargs=..., task_id=..., queue=..., priority=...)`` with this
project's configuration (JSON, Celery protocol 2, the default exchange); a test compares
the two field by field, and the workers' intake checks every message it takes anyway.

The list is kombu's list for the message's priority: the queue itself for priority 0,
``<queue>\\x06\\x16<step>`` for the others (``priority_steps`` 0, 3, 6, 9).
"""

from __future__ import annotations

import base64
import json
import os
import socket
from bisect import bisect
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from .celery_config import RUN_TASK

PRIORITY_STEPS = (0, 3, 6, 9)
"""kombu's Redis transport default ``priority_steps``."""
PRIORITY_SEPARATOR = "\x06\x16"
"""kombu's Redis transport separator between a queue and its priority step."""


def queue_list(queue: str, priority: int) -> str:
    """The Redis list kombu keeps the messages of ``queue`` with ``priority`` in."""
    step = PRIORITY_STEPS[bisect(PRIORITY_STEPS, priority) - 1]
    return f"{queue}{PRIORITY_SEPARATOR}{step}" if step else queue


def origin() -> str:
    """What Celery's ``origin`` header names for a client process (``gen<pid>@<host>``)."""
    return f"gen{os.getpid()}@{socket.gethostname()}"


def run_envelope(
    queue: str,
    task_id: str,
    kwargs: Mapping[str, str],
    priority: int,
    *,
    sender: str,
    reply_to: str,
    trace: Mapping[str, str] | None = None,
) -> str:
    """The JSON kombu pushes for a Celery protocol 2 message of ``RUN_TASK``; ``trace``:
    the task's ``traceparent`` / ``tracestate`` headers (``wire.tracing_context``), added
    beside Celery's own as ``send_task(headers=...)`` adds them."""
    body = json.dumps(
        [[], dict(kwargs), {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
    )
    headers: dict[str, Any] = {
        "lang": "py",
        "task": RUN_TASK,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": "()",
        "kwargsrepr": repr(dict(kwargs)),
        "origin": sender,
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    if trace:
        headers.update(trace)
    properties = {
        "correlation_id": task_id,
        "reply_to": reply_to,
        "delivery_mode": 2,
        "delivery_info": {"exchange": "", "routing_key": queue},
        "priority": priority,
        "body_encoding": "base64",
        "delivery_tag": str(uuid4()),
    }
    return json.dumps(
        {
            "body": base64.b64encode(body.encode()).decode(),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": properties,
        }
    )
