"""State shared by one harness and the sessions and tasks it owns."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from redis.asyncio import BlockingConnectionPool, Redis

from wire.codec import dumps, loads
from wire.keys import Keys
from wire.profiles import AgentProfile
from wire.settings import Settings
from wire.store import RecordStore

from .transport import TaskPublisher

if TYPE_CHECKING:
    from .session import CelerySession


def _observe(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


@dataclass(eq=False)
class CallerRuntime:
    settings: Settings
    profile: AgentProfile
    keys: Keys
    redis: Redis
    store: RecordStore
    publisher: TaskPublisher
    sessions: set[CelerySession] = field(default_factory=set)
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    closed: bool = False

    @classmethod
    def open(cls, settings: Settings, profile: AgentProfile) -> CallerRuntime:
        pool = BlockingConnectionPool.from_url(
            settings.redis_url,
            max_connections=settings.redis_max_connections,
            timeout=30,
            decode_responses=True,
        )
        redis = Redis(connection_pool=pool)
        keys = Keys(settings.namespace)
        return cls(
            settings=settings,
            profile=profile,
            keys=keys,
            redis=redis,
            store=RecordStore(redis, keys),
            publisher=TaskPublisher(settings),
        )

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
        request_id = uuid4().hex
        reply_key = self.keys.maintenance_reply(request_id)
        await self.redis.rpush(
            self.keys.maintenance_queue(),
            dumps({"id": request_id, "op": "delete_thread", "thread_id": thread_id}),
        )
        async with asyncio.timeout(within):
            item = await self.redis.blpop([reply_key], timeout=max(within, 0.01))
        if item is None:
            raise TimeoutError("no worker deleted the checkpoint thread within the budget")
        reply = loads(item[1])
        if not reply.get("ok"):
            raise RuntimeError(str(reply.get("error")))

    async def aclose(self) -> None:
        for task in tuple(self.background):
            task.cancel()
        if self.background:
            await asyncio.wait(tuple(self.background), timeout=1)
        await self.redis.aclose()
        await self.redis.connection_pool.disconnect()
        await asyncio.to_thread(self.publisher.close)
