"""One run's session lease: redis-py's asyncio ``Lock`` with a fencing token.

The claim script takes a session's lease for one run: the key ``keys.lease(session)``
holds ``"<fence>:<token>"`` with a TTL, the fence issued in order by ``INCR``. A
:class:`SessionLease` is that run's handle on it, and belongs to the run alone (never to
its process or its thread id), so a run that outlived its cancellation cannot pass for
the next run of its session in the same process:

- **renewal with a deadline**: the renewer extends the lease every ``ttl / 6``. If no
  renewal succeeded within ``ttl / 2`` of the last success (counted from when that
  renewal was sent, so the lease is known to live at least ``ttl`` from then), the lease
  counts as lost here *before* it can lapse in Redis: :attr:`lost` is set and the run
  stops its model call, so two runs of a session never call the model at once, however
  long a stall or partition lasts. A renewal reply that says the lease is another's, or a
  checkpoint write refused, sets :attr:`lost` too.
- **cancellation**: each renewal also reads the task's durable cancel flag and sets
  :attr:`cancel_requested`.
- **fenced checkpoint writes**: :meth:`put_checkpoint` and :meth:`put_writes` run one
  Lua script each (``wire/lua/checkpoint_put.lua``, ``checkpoint_writes.lua``) that
  checks ``GET lease == value`` and writes in the same atomic step; the saver
  (``workers.checkpoints``) finds the lease in the graph run's config
  (``configurable[LEASE_CONFIG_KEY]``).
- :meth:`release` stops the renewer and frees the lease (and the session, if its task is
  settled) when the value is still this run's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from wire import scripts
from wire.store import RecordStore

from .errors import StaleLeaseError

log = logging.getLogger(__name__)

LEASE_CONFIG_KEY = "ahp_session_lease"
"""The key of a graph run's ``RunnableConfig["configurable"]`` carrying its lease.
LangGraph hands the run's configurable to every checkpointer call of that run; an object
(not a str/int/float/bool) never reaches the checkpoint metadata."""

RENEW_EVERY = 1 / 6
"""Renewal interval, as a fraction of the lease TTL."""
RENEW_DEADLINE = 1 / 2
"""A lease not renewed within this fraction of its TTL since the last success is lost."""


class CheckpointScripts:
    """The fenced checkpoint-write scripts, registered on the checkpoint client."""

    def __init__(self, redis: Redis) -> None:
        self.put: AsyncScript = redis.register_script(scripts.CHECKPOINT_PUT)
        self.writes: AsyncScript = redis.register_script(scripts.CHECKPOINT_WRITES)


class SessionLease:
    """The lease one run holds on its session; see the module docstring."""

    def __init__(
        self,
        store: RecordStore,
        session_id: str,
        task_id: str,
        value: str,
        ttl: timedelta,
        *,
        acquired_at: float,
        cancel_requested: asyncio.Event | None = None,
        lost: asyncio.Event | None = None,
    ) -> None:
        """``acquired_at``: the loop time just before the claim was sent."""
        fence, _, token = value.partition(":")
        self.store = store
        self.session_id = session_id
        self.task_id = task_id
        self.value = value
        self.fence = int(fence)
        self.token = token
        self.key = store.keys.lease(session_id)
        self.thread_id = store.keys.thread_id(session_id)
        self.ttl = ttl
        self.cancel_requested = cancel_requested or asyncio.Event()
        self.lost = lost or asyncio.Event()
        self._ttl_ms = int(ttl.total_seconds() * 1000)
        self._interval = max(ttl.total_seconds() * RENEW_EVERY, 0.02)
        self._deadline = ttl.total_seconds() * RENEW_DEADLINE
        self._renewed_at = acquired_at
        self._renewer: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"SessionLease(session={self.session_id!r}, value={self.value!r})"

    # -- validity ------------------------------------------------------------------------
    @property
    def valid_until(self) -> float:
        """Loop time after which this run must no longer act as the holder."""
        return self._renewed_at + self._deadline

    def locally_valid(self) -> bool:
        """Not lost, and the renewal deadline has not passed."""
        if self.lost.is_set():
            return False
        if asyncio.get_running_loop().time() >= self.valid_until:
            self._lose("its renewal deadline passed")
            return False
        return True

    def _lose(self, why: str) -> None:
        if not self.lost.is_set():
            log.warning("task %s lost its session lease %s: %s", self.task_id, self.value, why)
            self.lost.set()

    # -- renewal -------------------------------------------------------------------------
    def start(self) -> None:
        """Start renewing (the claim has just set a full TTL)."""
        if self._renewer is None:
            self._renewer = asyncio.create_task(self._renew_until_lost())

    async def stop(self) -> None:
        """Stop renewing; the lease stays in Redis until released or lapsed."""
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def _renew_until_lost(self) -> None:
        loop = asyncio.get_running_loop()
        pause = self._interval
        while True:
            now = loop.time()
            if now >= self.valid_until:
                self._lose("no renewal succeeded before its deadline")
                return
            await asyncio.sleep(min(pause, self.valid_until - now))
            sent_at = loop.time()
            if sent_at >= self.valid_until:  # woke late (a stall, SIGSTOP)
                self._lose("no renewal succeeded before its deadline")
                return
            attempt = asyncio.ensure_future(
                self.store.renew(self.session_id, self.task_id, self.value, self._ttl_ms)
            )
            done, _ = await asyncio.wait({attempt}, timeout=self.valid_until - sent_at)
            if not done:
                attempt.cancel()
                self._lose("a renewal did not complete before its deadline")
                return
            try:
                held, cancel = attempt.result()
            except Exception as error:
                # Redis unreachable (restarting): retry soon while the deadline allows.
                log.warning("task %s could not renew its lease (%s); retrying", self.task_id, error)
                pause = min(0.2, self._interval)
                continue
            if not held:
                self._lose("the lease is no longer this run's")
                return
            self._renewed_at = sent_at
            pause = self._interval
            if cancel:
                self.cancel_requested.set()

    async def release(self) -> str:
        """Stop renewing and free the lease if it is still this run's; returns the task
        promoted from the session's queue ('' if none), to be published."""
        await self.stop()
        return await self.store.release(self.session_id, self.task_id, self.value)

    async def hand_back(self) -> bool:
        """The worker is stopping and the run ended unsettled: stop renewing, free the lease
        if it is still this run's and mark the task handed back (requeued, not lost: the
        next claim resumes it without counting a lost delivery). Whether it was."""
        await self.stop()
        return await self.store.hand_back(self.session_id, self.task_id, self.value)

    # -- fenced checkpoint writes --------------------------------------------------------
    def _refused(self, what: str) -> StaleLeaseError:
        self._lose(f"its {what} was refused")
        return StaleLeaseError(
            f"{what} refused: thread {self.thread_id!r} is no longer held by lease {self.value}",
            thread_id=self.thread_id,
            task_id=self.task_id,
        )

    async def put_checkpoint(
        self,
        fenced: CheckpointScripts,
        checkpoint_key: str,
        document: str | bytes,
        latest_key: str,
        ttl_seconds: int | None,
    ) -> None:
        """Write a checkpoint document and move the thread's latest pointer to it, in one
        atomic step with the lease check. Raises :class:`StaleLeaseError` if refused."""
        if not self.locally_valid():
            raise self._refused("checkpoint write")
        written = await fenced.put(
            keys=[self.key, checkpoint_key, latest_key],
            args=[self.value, document, ttl_seconds or 0],
        )
        if not int(written):
            raise self._refused("checkpoint write")

    async def put_writes(
        self,
        fenced: CheckpointScripts,
        checkpoint_key: str,
        registry_key: str | None,
        writes: Sequence[tuple[str, str | bytes]],
        ttl_seconds: int | None,
    ) -> None:
        """Store pending-write documents ``(key, JSON)`` of a checkpoint, mark it as having
        writes and register them, in one atomic step with the lease check."""
        if not self.locally_valid():
            raise self._refused("pending writes")
        keys = [self.key, checkpoint_key, registry_key or checkpoint_key]
        args: list[Any] = [self.value, ttl_seconds or 0, "1" if registry_key else "0"]
        for key, document in writes:
            keys.append(key)
            args.append(document)
        written = await fenced.writes(keys=keys, args=args)
        if not int(written):
            raise self._refused("pending writes")


__all__ = ["LEASE_CONFIG_KEY", "CheckpointScripts", "SessionLease"]
