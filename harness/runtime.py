"""State shared by one harness and the sessions and tasks it owns.

Its Redis connections are few and fixed (``harness.connections``): a bounded pool for
commands, the publisher's own, and the one connection of the stream reader that follows
every task stream of its handles."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import uuid4

from agent_harness_protocol import HarnessTransportError, SessionId
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wire.keys import Keys
from wire.messages import MaintenanceOperation, MaintenanceReply, MaintenanceRequest
from wire.modules import missing_modules
from wire.profiles import AgentProfile
from wire.redis_options import pool_options
from wire.settings import Settings
from wire.store import RecordStore

from .connections import POOL_SIZE, caller_pool, client_name
from .errors import RedisModulesMissingError
from .responses import Responder, ResponderFactory
from .stream_reader import StreamReader
from .transport import Publisher, TaskPublisher

log = logging.getLogger(__name__)

PublisherFactory = Callable[[Settings], Publisher]
"""Builds the harness's publisher (default: :class:`TaskPublisher`, Celery to Redis)."""


class OpenSession(Protocol):
    """What the harness's closing needs of an open session handle. The runtime knows its
    sessions only through this, so it never imports the session module: handles share the
    runtime, the runtime holds no handle's internals."""

    @property
    def id(self) -> SessionId: ...

    async def release(self) -> None: ...

    async def force_unresolved_cleanup(self) -> None: ...


def _observe(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


@dataclass(eq=False)
class CallerRuntime:
    """The one object a harness shares with its session and task handles: settings,
    clients, the record store, the publisher, the stream reader, the open sessions and
    background work. Handles reach each other's state only through it (or Redis), never
    through another handle."""

    settings: Settings
    profile: AgentProfile
    keys: Keys
    redis: Redis
    store: RecordStore
    publisher: Publisher
    responder: Responder
    sessions: set[OpenSession] = field(default_factory=set)
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    closed: bool = False
    handles: dict[str, set[str]] = field(default_factory=dict)
    """Open handles of persistent sessions, by session id; refreshed by the heartbeat."""
    _heartbeat: asyncio.Task[None] | None = None
    _checkpoint_redis: Redis | None = None
    """A client of the checkpoint Redis, only when it is not the records' Redis."""
    reader: StreamReader = field(init=False)
    """Follows every task stream of this runtime's handles, on one connection of its own
    (its loop starts with the first subscription)."""

    def __post_init__(self) -> None:
        self.reader = StreamReader.open(
            self.settings.redis_url, self.redis, self.spawn, client_name=client_name()
        )

    @classmethod
    def open(
        cls,
        settings: Settings,
        profile: AgentProfile,
        publisher_factory: PublisherFactory | None = None,
        responder_factory: ResponderFactory | None = None,
    ) -> CallerRuntime:
        pool = caller_pool(settings.redis_url, POOL_SIZE, decode_responses=True)
        redis = Redis(connection_pool=pool)
        keys = Keys(settings.namespace)
        store = RecordStore(redis, keys, settings.task_retention)
        return cls(
            settings=settings,
            profile=profile,
            keys=keys,
            redis=redis,
            store=store,
            publisher=(publisher_factory or TaskPublisher)(settings),
            responder=store if responder_factory is None else responder_factory(store),
        )

    async def require_checkpoint_modules(self) -> None:
        """Refuse to open sessions on a Redis without the Query Engine and JSON (no worker
        could ever run them). One round trip the first time, none after it passed.

        Raises:
            RedisModulesMissingError: the checkpoint Redis lacks them.
            HarnessTransportError: the checkpoint Redis could not be reached.
        """
        url = self.settings.effective_checkpoint_url
        client = self.redis
        if url != self.settings.redis_url:
            if self._checkpoint_redis is None:
                self._checkpoint_redis = Redis.from_url(
                    url, client_name=client_name(), **pool_options()
                )
            client = self._checkpoint_redis
        try:
            missing = await missing_modules(client, url)
        except (RedisConnectionError, RedisTimeoutError) as error:
            raise HarnessTransportError(f"could not reach the checkpoint Redis: {error}") from error
        if missing is not None:
            raise RedisModulesMissingError(missing)

    @property
    def handle_ttl_ms(self) -> int:
        return int(self.settings.handle_ttl.total_seconds() * 1000)

    def track_handle(self, session_id: str, handle_id: str) -> None:
        """Keep refreshing a registered handle until it is dropped."""
        self.handles.setdefault(session_id, set()).add(handle_id)
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = self.spawn(self._refresh_handles())

    async def drop_handle(self, session_id: str, handle_id: str) -> None:
        handles = self.handles.get(session_id, set())
        handles.discard(handle_id)
        if not handles:
            self.handles.pop(session_id, None)
        await self.store.drop_handle(session_id, handle_id)

    async def _refresh_handles(self) -> None:
        """Refresh this process's open handles every third of their TTL, so a crashed
        caller's handles lapse while a live caller's never do."""
        interval = max(self.settings.handle_ttl.total_seconds() / 3, 0.05)
        while True:
            await asyncio.sleep(interval)
            for session_id, handles in tuple(self.handles.items()):
                try:
                    await self.store.touch_handles(session_id, tuple(handles), self.handle_ttl_ms)
                except Exception:
                    log.warning("could not refresh the handles of session %s", session_id)

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        task.add_done_callback(_observe)
        return task

    async def delete_thread(self, thread_id: str, within: float) -> None:
        """Ask any worker to delete a checkpoint thread; wait at most ``within`` seconds.

        The request is durable: if no worker answers in time it still runs later.
        Raises ``TimeoutError`` or ``RuntimeError`` (the worker's report).
        """
        request = MaintenanceRequest(uuid4().hex, MaintenanceOperation.DELETE_THREAD, thread_id)
        reply_key = self.keys.maintenance_reply(request.id)
        await self.redis.rpush(self.keys.maintenance_queue(), request.to_json())
        async with asyncio.timeout(within):
            item = await self.redis.blpop([reply_key], timeout=max(within, 0.01))
        if item is None:
            raise TimeoutError("no worker deleted the checkpoint thread within the budget")
        reply = MaintenanceReply.from_json(item[1])
        if not reply.ok:
            raise RuntimeError(str(reply.error))

    async def aclose(self) -> None:
        for session_id, handles in tuple(self.handles.items()):
            for handle_id in tuple(handles):
                with contextlib.suppress(Exception):
                    await self.drop_handle(session_id, handle_id)
        for task in tuple(self.background):
            task.cancel()
        if self.background:
            await asyncio.wait(tuple(self.background), timeout=1)
        await self.reader.aclose()
        for client in filter(None, (self.redis, self._checkpoint_redis)):
            await client.aclose()
            await client.connection_pool.disconnect()
        aclose = getattr(self.publisher, "aclose", None)
        if aclose is not None:
            await aclose()
        await asyncio.to_thread(self.publisher.close)
