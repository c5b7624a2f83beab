"""The LangGraph dialect's own records: threads (a session of a tenant, with metadata)
and runs (a segment of a task). Keys: ``wire.keys.Keys.lg_*``, each with its lifetime."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict
from redis.asyncio import Redis
from redis.exceptions import WatchError

from wire.keys import Keys

RESERVATION = timedelta(seconds=30)
RUN_RETENTION_FLOOR = timedelta(days=7)


class ThreadRecord(BaseModel):
    """A thread: the session it is, and what the client said of it."""

    model_config = ConfigDict(frozen=True)

    thread_id: str
    session_id: str
    metadata: dict[str, Any]
    created_ms: int
    updated_ms: int


class RunRecord(BaseModel):
    """A run: the task it is a segment of, from entry ``start`` of the task's stream."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    thread_id: str
    task_id: str
    start: str
    assistant_id: str
    metadata: dict[str, Any]
    multitask_strategy: str | None
    stream_modes: tuple[str, ...]
    input_text: str
    base: tuple[dict[str, Any], ...] | None
    """The thread's messages before the task; ``None`` until known (a queued task's
    predecessor may still be running)."""
    stateless: bool
    created_ms: int


class ThreadExistsError(Exception):
    """A thread with this id exists (or is being created) for the tenant."""


def now_ms() -> int:
    return int(time.time() * 1000)


_WALK_PAGE = 8
"""Run records read per round trip by :meth:`LangGraphRecords.newest_first`."""


class LangGraphRecords:
    """Reads and writes of thread and run records, for one tenant's requests."""

    def __init__(self, redis: Redis, keys: Keys, task_retention: timedelta) -> None:
        self._redis = redis
        self._keys = keys
        self._run_ttl = max(task_retention, RUN_RETENTION_FLOOR)

    # -- threads --------------------------------------------------------------------
    async def reserve_thread(self, tenant: str, thread_id: str) -> str:
        """Reserve ``thread_id`` for a create (the token proves the reservation)."""
        token = f"reserved:{uuid.uuid4().hex}"
        done = await self._redis.set(
            self._keys.lg_thread(tenant, thread_id), token, nx=True, px=RESERVATION
        )
        if not done:
            raise ThreadExistsError(thread_id)
        return token

    async def create_thread(self, tenant: str, record: ThreadRecord, token: str) -> None:
        """Make the reserved thread permanent, if the reservation is still this one's."""
        key = self._keys.lg_thread(tenant, record.thread_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(key)
                if await pipe.get(key) != token:
                    raise ThreadExistsError(record.thread_id)
                pipe.multi()  # type: ignore[no-untyped-call]
                pipe.set(key, record.model_dump_json())
                pipe.zadd(self._keys.lg_threads(tenant), {record.thread_id: record.created_ms})
                await pipe.execute()
            except WatchError:
                raise ThreadExistsError(record.thread_id) from None

    async def release_reservation(self, tenant: str, thread_id: str, token: str) -> None:
        key = self._keys.lg_thread(tenant, thread_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(key)
                if await pipe.get(key) == token:
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.delete(key)
                    await pipe.execute()
            except WatchError:
                pass

    async def thread(self, tenant: str, thread_id: str) -> ThreadRecord | None:
        raw = await self._redis.get(self._keys.lg_thread(tenant, thread_id))
        if raw is None or str(raw).startswith("reserved:"):
            return None
        return ThreadRecord.model_validate_json(raw)

    async def touch_thread(self, tenant: str, record: ThreadRecord) -> None:
        key = self._keys.lg_thread(tenant, record.thread_id)
        updated = record.model_copy(update={"updated_ms": now_ms()})
        await self._redis.set(key, updated.model_dump_json(), xx=True)

    async def thread_ids(self, tenant: str) -> list[str]:
        return [
            str(member) for member in await self._redis.zrange(self._keys.lg_threads(tenant), 0, -1)
        ]

    async def delete_thread(self, tenant: str, thread_id: str) -> None:
        runs = await self._redis.zrange(self._keys.lg_thread_runs(tenant, thread_id), 0, -1)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(self._keys.lg_thread(tenant, thread_id))
            pipe.zrem(self._keys.lg_threads(tenant), thread_id)
            pipe.delete(self._keys.lg_thread_runs(tenant, thread_id))
            for run_id in runs:
                pipe.delete(self._keys.lg_run(tenant, str(run_id)))
            await pipe.execute()

    # -- runs -----------------------------------------------------------------------
    async def save_run(self, tenant: str, record: RunRecord) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.set(
                self._keys.lg_run(tenant, record.run_id), record.model_dump_json(), px=self._run_ttl
            )
            pipe.zadd(
                self._keys.lg_thread_runs(tenant, record.thread_id),
                {record.run_id: record.created_ms},
            )
            await pipe.execute()

    async def run(self, tenant: str, run_id: str) -> RunRecord | None:
        key = self._keys.lg_run(tenant, run_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(key)
            pipe.pexpire(key, self._run_ttl)
            raw, _ = await pipe.execute()
        return None if raw is None else RunRecord.model_validate_json(raw)

    async def set_base(
        self, tenant: str, record: RunRecord, base: Sequence[dict[str, Any]]
    ) -> RunRecord:
        updated = record.model_copy(update={"base": tuple(base)})
        await self._redis.set(
            self._keys.lg_run(tenant, record.run_id),
            updated.model_dump_json(),
            xx=True,
            px=self._run_ttl,
        )
        return updated

    async def run_ids(self, tenant: str, thread_id: str) -> list[str]:
        """The thread's run ids, oldest first."""
        return [
            str(m)
            for m in await self._redis.zrange(self._keys.lg_thread_runs(tenant, thread_id), 0, -1)
        ]

    async def newest_first(
        self, tenant: str, thread_id: str, *, before: str | None = None
    ) -> AsyncIterator[RunRecord]:
        """The thread's runs whose records still exist, newest first (those created
        before run ``before`` if given), read a page at a time: a walk that stops early
        reads a few records, not the thread's every run."""
        ids = await self.run_ids(tenant, thread_id)
        end = ids.index(before) if before in ids else len(ids)
        while end > 0:
            page = ids[max(0, end - _WALK_PAGE) : end]
            end -= len(page)
            raws = await self._redis.mget([self._keys.lg_run(tenant, run_id) for run_id in page])
            for raw in reversed(raws):
                if raw is not None:
                    yield RunRecord.model_validate_json(raw)

    async def runs(self, tenant: str, thread_id: str) -> list[RunRecord]:
        """The thread's runs whose records still exist, oldest first."""
        ids = await self.run_ids(tenant, thread_id)
        if not ids:
            return []
        raws = await self._redis.mget([self._keys.lg_run(tenant, run_id) for run_id in ids])
        return [RunRecord.model_validate_json(raw) for raw in raws if raw is not None]


__all__ = [
    "LangGraphRecords",
    "RunRecord",
    "ThreadExistsError",
    "ThreadRecord",
    "now_ms",
]
