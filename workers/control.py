"""The worker's control loops outside the Celery slots: the cancellation listener and the
durable maintenance consumer, with the backoff they share while Redis is unreachable.

Both run on the worker loop (``workers.runtime``) for as long as the process lives, so busy
Celery slots cannot starve them.

Maintenance is durable: a consumer moves each request atomically from the queue into its
own processing list (``BLMOVE``) and removes it only in the transaction that pushes the
reply. Each consumer keeps a liveness key alive (heartbeat every third of its TTL); the
heartbeat of any worker puts the requests of a consumer whose liveness lapsed (a worker
killed, or stopped past the TTL) back at the front of the queue. A request taken by a
worker that dies is therefore carried out by another one; the work is idempotent, so a
stalled consumer that wakes up and repeats it does no harm.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wire import scripts
from wire.backoff import CONNECTION_ERRORS, Outage
from wire.keys import Keys
from wire.messages import MaintenanceReply, MaintenanceRequest
from wire.records import TaskField
from wire.store_results import reply_text

log = logging.getLogger(__name__)

REPLY_TTL_SECONDS = 120
"""How long an unread maintenance reply stays (set with the push, in one transaction)."""

_TAKE_TIMEOUT_SECONDS = 2


def raise_if_cancelled() -> None:
    """redis-py can finish a command whose task was cancelled and drop the
    ``CancelledError``; a loop that would go on forever honours the request here."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class CancellationTarget(Protocol):
    """A live run of this process that a cancellation request can reach."""

    @property
    def cancel_requested(self) -> asyncio.Event: ...


class CancelListener:
    """Delivers cancellation requests to this process's runs the moment they are made.

    A lost connection (Redis restarting) is retried with backoff for as long as the
    process lives. Pub/sub does not replay what was published while this listener was
    away, so after reconnecting it reads the durable cancel flag of every live run once
    (the lease renewer reads it too, every sixth of the TTL)."""

    def __init__(self, redis: Redis, keys: Keys, runs: Mapping[str, CancellationTarget]) -> None:
        self._redis = redis
        self._keys = keys
        self._runs = runs

    async def serve(self) -> None:
        channel = self._keys.cancel_channel()
        outage = Outage("cancellation listener", logger=log)
        while True:
            raise_if_cancelled()
            try:
                async with self._redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(channel)
                    if outage.recovered():
                        await self._recheck()
                    while True:
                        raise_if_cancelled()
                        message = await pubsub.get_message(timeout=2.0)
                        if message is None:
                            continue
                        run = self._runs.get(reply_text(message["data"]))
                        if run is not None:
                            run.cancel_requested.set()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                await outage.back_off(error)

    async def _recheck(self) -> None:
        for task_id, run in tuple(self._runs.items()):
            if (
                reply_text(await self._redis.hget(self._keys.task(task_id), TaskField.CANCEL))
                == "1"
            ):
                run.cancel_requested.set()


DeleteThread = Callable[[str], Awaitable[None]]
"""Deletes one checkpoint thread (idempotent)."""


class MaintenanceConsumer:
    """Carries out maintenance requests (delete a released session's checkpoint thread)
    durably; see the module docstring.

    Args:
        redis: The records' Redis (``decode_responses=True``).
        keys: The deployment's keys.
        consumer: This consumer's id (unique per worker process and start).
        delete_thread: Deletes a checkpoint thread.
        liveness: How long this consumer counts as alive after its last heartbeat; its
            requests are recovered by others about this long after it died.
    """

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        consumer: str,
        delete_thread: DeleteThread,
        liveness: float,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._consumer = consumer
        self._delete_thread = delete_thread
        self._liveness_ms = max(int(liveness * 1000), 300)
        self._processing = keys.maintenance_processing(consumer)
        self._heartbeat_script: AsyncScript = redis.register_script(scripts.MAINTENANCE_HEARTBEAT)
        self._registered = asyncio.Event()

    async def serve(self) -> None:
        """Heartbeat (with recovery of dead consumers' requests) and take requests until
        cancelled. No request is taken before this consumer is registered, so one it
        took can always be recovered."""
        heartbeat = asyncio.create_task(self._keep_alive())
        try:
            await self._registered.wait()
            await self._take_requests()
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)

    async def leave(self) -> int:
        """Stop counting as alive and put this consumer's unanswered requests back on the
        queue; returns how many. Call after ``serve`` was cancelled."""
        return await self._heartbeat(0)

    async def heartbeat(self) -> int:
        """Renew this consumer's liveness and recover the requests of dead consumers;
        returns how many requests went back on the queue."""
        return await self._heartbeat(self._liveness_ms)

    async def _heartbeat(self, liveness_ms: int) -> int:
        keys = self._keys
        moved = await self._heartbeat_script(
            keys=[
                keys.maintenance_consumers(),
                keys.maintenance_consumer(self._consumer),
                keys.maintenance_queue(),
                self._processing,
            ],
            args=[
                self._consumer,
                liveness_ms,
                keys.maintenance_consumer(""),
                keys.maintenance_processing(""),
            ],
        )
        return int(moved)

    async def _keep_alive(self) -> None:
        interval = self._liveness_ms / 3000
        outage = Outage("maintenance heartbeat", logger=log)
        while True:
            raise_if_cancelled()
            try:
                moved = await self.heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                await outage.back_off(error)
                continue
            outage.recovered()
            self._registered.set()
            if moved:
                log.warning("put %d maintenance requests of a lost worker back on the queue", moved)
            await asyncio.sleep(interval)

    async def _take_requests(self) -> None:
        queue = self._keys.maintenance_queue()
        outage = Outage("maintenance consumer", logger=log)
        # Requests left in this consumer's list (e.g. by an outage) are carried out first.
        pending = True
        while True:
            raise_if_cancelled()
            try:
                if pending:
                    item = await self._redis.lindex(self._processing, 0)
                    pending = item is not None
                if not pending:
                    item = await self._redis.blmove(
                        queue, self._processing, _TAKE_TIMEOUT_SECONDS, "LEFT", "RIGHT"
                    )
            except asyncio.CancelledError:
                raise
            except Exception as error:
                await outage.back_off(error)
                continue
            outage.recovered()
            if item is not None:
                await self._answer(reply_text(item))

    async def _answer(self, raw: str) -> None:
        """Carry out one request, then push its reply (with its TTL) and drop the request
        from the processing list in one transaction. Both are idempotent, so both are
        tried again while Redis is unreachable."""
        try:
            request = MaintenanceRequest.from_json(raw)
        except ValueError as error:
            log.error("maintenance request dropped (%s): %.200r", error, raw)
            await self._drop(raw)
            return
        key = self._keys.maintenance_reply(request.id)
        outage = Outage(f"maintenance request {request.id}", logger=log)
        while True:
            raise_if_cancelled()
            try:
                reply = await self._carry_out(request)
                async with self._redis.pipeline(transaction=True) as pipe:
                    if request.reply:
                        pipe.rpush(key, reply.to_json())
                        pipe.expire(key, REPLY_TTL_SECONDS)
                    elif not reply.ok:
                        log.error("maintenance request %s failed: %s", request.id, reply.error)
                    pipe.lrem(self._processing, 1, raw)
                    await pipe.execute()
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                await outage.back_off(error)

    async def _drop(self, raw: str) -> None:
        try:
            await self._redis.lrem(self._processing, 1, raw)
        except (RedisConnectionError, RedisTimeoutError):
            log.warning("could not drop a malformed maintenance request; it is retried")

    async def _carry_out(self, request: MaintenanceRequest) -> MaintenanceReply:
        """The reply to one request (a delete: the only operation a request can name);
        connection errors propagate (the work is retried)."""
        try:
            await self._delete_thread(request.thread_id)
        except CONNECTION_ERRORS:
            raise
        except Exception as error:
            return MaintenanceReply(False, f"{type(error).__name__}: {error}")
        return MaintenanceReply(True)


__all__ = [
    "REPLY_TTL_SECONDS",
    "CancelListener",
    "CancellationTarget",
    "DeleteThread",
    "MaintenanceConsumer",
    "Outage",
    "raise_if_cancelled",
]
