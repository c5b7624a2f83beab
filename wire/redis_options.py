"""Options every Redis connection pool of the harness is built with."""

from __future__ import annotations

from typing import Any


def pool_options() -> dict[str, Any]:
    """Keyword arguments for a redis-py connection pool (``from_url`` or the class).

    redis-py 8 (RESP3 by default) turns "maintenance notifications" on for every TCP
    pool, and while they are on its pools no longer replace connections the server
    closed: after a Redis restart each idle pooled connection fails its next command
    with "Connection closed by server" (a claim, a settle, a checkpoint write...). The
    notifications only serve Redis Enterprise / Cloud maintenance; turned off, a pool
    checks every connection it hands out again and reconnects a closed one (the
    upstream fix is redis/redis-py#4260, not in a release up to 8.1.0).
    """
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # redis-py before 7: neither the feature nor the regression
        return {}
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}
