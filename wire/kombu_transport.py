"""kombu's Redis transport, without a new Redis client object per command.

kombu's Redis channel runs every command it sends outside the consumer's event loop
(a publish, the bookkeeping of a delivery, an acknowledgement, an event batch) through
``conn_or_acquire()``, which builds a new ``redis.Redis`` on the channel's pool for each
one. Building a client is not cheap (redis-py fills a table of some two hundred response
callbacks), and a run message costs several of them between the caller's publish and the
worker's acknowledgement.

:class:`ReusingRedisChannel` builds one client per connection pool and reuses it. A
client holds no connection of its own (each command checks one out of the pool), so
sharing it changes nothing else; when kombu replaces the pool (after a connection
error) the next command builds a client on the new one.

The transport is registered as ``redis-reusing``; the workers' guarded transport
(``workers.guarded_transport``) derives from the same channel.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu import transport as kombu_transports
from kombu.transport import redis as kombu_redis

TRANSPORT_ALIAS = "redis-reusing"
"""The kombu transport name of :class:`ReusingRedisTransport` (``broker_transport``)."""


class ReusingRedisChannel(kombu_redis.Channel):
    _reused: tuple[Any, Any] | None = None  # (pool, client on that pool)

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool
        reused = self._reused
        if reused is None or reused[0] is not pool:
            reused = (pool, self._create_client())  # type: ignore[no-untyped-call]
            self._reused = reused
        yield reused[1]


class ReusingRedisTransport(kombu_redis.Transport):
    Channel = ReusingRedisChannel


kombu_transports.TRANSPORT_ALIASES[TRANSPORT_ALIAS] = (
    f"{ReusingRedisTransport.__module__}:{ReusingRedisTransport.__qualname__}"
)
