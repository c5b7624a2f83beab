"""Every run's event appends of one worker process, sent together.

Each run's ``EventSink`` appends its batches in order, one at a time, through the fenced
append script. With hundreds of runs streaming on one loop, one script call per batch
per run is most of a worker's CPU: a connection checked out of the pool, a command
packed, a reply awaited, each time. The batcher collects the appends every sink has
waiting and sends them as one pipeline (``EVALSHA append`` per batch, no transaction):
one connection, one write, one read for all of them. Each sink still sees the result of
its own append (the script's reply, or the error that ended the round trip), so its
ordering, retry and fencing are unchanged (see ``workers.event_sink``); resending a batch
whose reply was lost appends nothing (the script records each lease's last batch).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from wire import scripts
from wire.store import RecordStore

MAX_PIPELINE = 512
"""Appends sent in one pipeline at most; more wait for the next round trip."""


class Appender(Protocol):
    """Where an ``EventSink`` appends: the store itself, or this process's batcher."""

    async def append(
        self,
        session_id: str,
        task_id: str,
        lease: str,
        entries: Sequence[tuple[str, str, str]],
        batch: int,
    ) -> int: ...


@dataclass(slots=True)
class _Append:
    keys: list[str]
    args: list[str]
    done: asyncio.Future[int] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class AppendBatcher:
    """An :class:`Appender` for every run of the process; see the module docstring."""

    def __init__(self, redis: Redis, store: RecordStore) -> None:
        self._redis = redis
        self._store = store
        self._waiting: list[_Append] = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self.round_trips = 0
        """Pipelines sent so far."""

    async def append(
        self,
        session_id: str,
        task_id: str,
        lease: str,
        entries: Sequence[tuple[str, str, str]],
        batch: int,
    ) -> int:
        keys, args = self._store.append_call(session_id, task_id, lease, entries, batch)
        request = _Append(keys, args)
        self._waiting.append(request)
        self._wake.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_forever())
        # The request is the batcher's once queued: a cancelled sink still learns nothing
        # from it, and the writer resolves it whatever happens.
        return await asyncio.shield(request.done)

    async def aclose(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    async def _write_forever(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._waiting:
                    batch = self._waiting[:MAX_PIPELINE]
                    del self._waiting[:MAX_PIPELINE]
                    await self._send(batch)
        finally:
            for request in self._waiting:
                if not request.done.done():
                    request.done.set_exception(asyncio.CancelledError())
            self._waiting.clear()

    async def _send(self, batch: list[_Append]) -> None:
        try:
            replies = await self._execute(batch)
        except BaseException as error:
            for request in batch:
                if not request.done.done():
                    request.done.set_exception(error)
            if isinstance(error, asyncio.CancelledError):
                raise
            return
        missing = [
            request
            for request, reply in zip(batch, replies, strict=True)
            if isinstance(reply, NoScriptError)
        ]
        if missing:
            # Redis restarted and forgot the script: load it, send those again.
            try:
                await self._redis.script_load(scripts.APPEND)
                retried = await self._execute(missing)
            except Exception as error:
                retried = [error] * len(missing)
            again = dict(zip(map(id, missing), retried, strict=True))
            replies = [
                again.get(id(request), reply) for request, reply in zip(batch, replies, strict=True)
            ]
        for request, reply in zip(batch, replies, strict=True):
            if request.done.done():
                continue
            if isinstance(reply, BaseException):
                request.done.set_exception(reply)
            else:
                request.done.set_result(int(reply))

    async def _execute(self, batch: Sequence[_Append]) -> list[Any]:
        pipe = self._redis.pipeline(transaction=False)
        sha = self._store.append_sha
        for request in batch:
            pipe.evalsha(sha, len(request.keys), *request.keys, *request.args)
        self.round_trips += 1
        return list(await pipe.execute(raise_on_error=False))


__all__ = ["MAX_PIPELINE", "AppendBatcher", "Appender"]
