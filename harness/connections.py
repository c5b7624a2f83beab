"""How a caller process connects to Redis: a few pooled connections and one reader.

A caller's connections do not grow with the number of tasks it follows: its commands
share one bounded pool (:data:`POOL_SIZE`), its publisher another (:data:`PUBLISHER_POOL_SIZE`,
see ``harness.transport``), and every task stream it follows is read on the one dedicated
connection of its stream reader (``harness.stream_reader``). A command waits for a free
pooled connection (at most ``POOL_WAIT``); a wait that ends without one is a refusal (the
command was never sent, see ``harness.redis_errors``).

Every connection of a caller carries the client name :func:`client_name` (``CLIENT
LIST`` tells the callers' connections from the workers').
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from redis.asyncio import BlockingConnectionPool

from wire.redis_options import pool_options

POOL_SIZE = 8
"""Pooled connections of a caller's commands (starts, settles, cancels, unblocking its
stream reader): none of them blocks, so a few serve thousands of tasks."""
PUBLISHER_POOL_SIZE = 4
"""Pooled connections of a caller's publisher (one ``LPUSH`` per published run)."""
POOL_WAIT = timedelta(seconds=30)
"""How long a command waits for a free pooled connection."""


def client_name() -> str:
    """The client name of this process's caller connections (``ahp-caller-<pid>``)."""
    return f"ahp-caller-{os.getpid()}"


def caller_pool(url: str, size: int, **options: Any) -> BlockingConnectionPool:
    """A bounded pool of named caller connections to ``url`` (``options``: redis-py
    connection options, such as ``decode_responses``)."""
    pool: BlockingConnectionPool = BlockingConnectionPool.from_url(
        url,
        max_connections=size,
        timeout=POOL_WAIT.total_seconds(),
        client_name=client_name(),
        **options,
        **pool_options(),  # reconnect connections a restarted Redis closed
    )
    return pool


__all__ = ["POOL_SIZE", "POOL_WAIT", "PUBLISHER_POOL_SIZE", "caller_pool", "client_name"]
