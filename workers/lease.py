"""One run's session lease: redis-py's asyncio ``Lock`` with a fencing token.

The claim script takes a session's lease for one run: the key ``keys.lease(session)``
holds ``"<fence>:<token>"`` with a TTL, the fence issued in order by ``INCR``. A
:class:`SessionLease` is that run's handle on it, and belongs to the run alone (never to
its process or its thread id), so a run that outlived its cancellation cannot pass for
the next run of its session in the same process:

- **renewal with a deadline**: the process's :class:`~workers.lease_renewer.LeaseRenewer`
  (one thread, one pipelined round trip for every lease) extends it every ``ttl / 6``. If no
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
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from wire import scripts
from wire.store import RecordStore

from .errors import StaleLeaseError

log = logging.getLogger(__name__)


class Renewer(Protocol):
    """What renews a lease (the process's ``workers.lease_renewer.LeaseRenewer``)."""

    def add(self, lease: SessionLease) -> None: ...
    def remove(self, lease: SessionLease) -> None: ...


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
        renewer: Renewer | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """``acquired_at``: ``time.monotonic()`` just before the claim was sent (asyncio's
        own loops count ``loop.time()`` on the same clock). ``renewer``: the process's
        renewer (none: the lease is never renewed, as in unit tests of the fence). ``loop``:
        the loop its run goes on (default: the running one); a lease built in another
        thread (``workers.claimer``) names it."""
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
        self._interval = max(ttl.total_seconds() * RENEW_EVERY, 0.02)
        self._deadline = ttl.total_seconds() * RENEW_DEADLINE
        self._renewed_at = acquired_at
        self._next_renewal = acquired_at + self._interval
        self._renewer = renewer
        self._renewing = False
        self._lost_here = False
        self._ending = False
        self._confirmed = False
        self._first_renewal = asyncio.Event()
        self._ttl = ttl.total_seconds()
        self._acquired_at = acquired_at
        self._loop = loop or asyncio.get_running_loop()

    def __repr__(self) -> str:
        return f"SessionLease(session={self.session_id!r}, value={self.value!r})"

    # -- validity ------------------------------------------------------------------------
    @property
    def valid_until(self) -> float:
        """``time.monotonic()`` after which this run must no longer act as the holder."""
        return self._renewed_at + self._deadline

    @property
    def next_renewal(self) -> float:
        """``time.monotonic()`` at which the renewer renews this lease next."""
        return self._next_renewal

    @property
    def confirmed(self) -> bool:
        """A renewal has found the lease still this run's since the claim."""
        return self._confirmed

    @property
    def lapses_by(self) -> float:
        """``time.monotonic()`` by which the lease has lapsed in Redis if no renewal since
        the claim succeeded (one TTL after the claim was sent)."""
        return self._acquired_at + self._ttl

    @property
    def lost_here(self) -> bool:
        """Counted as lost (set at once, from any thread; ``lost`` follows on the loop)."""
        return self._lost_here

    def locally_valid(self) -> bool:
        """Not lost, and the renewal deadline has not passed."""
        if self._lost_here or self.lost.is_set():
            return False
        if time.monotonic() >= self.valid_until:
            self._lose("its renewal deadline passed")
            return False
        return True

    def _lose(self, why: str) -> None:
        if not self.lost.is_set():
            log.warning("task %s lost its session lease %s: %s", self.task_id, self.value, why)
        self._lost_here = True
        self.lost.set()

    # -- renewal (by the process's LeaseRenewer, in its thread) --------------------------
    def start(self) -> None:
        """Start renewing (the claim has just set a full TTL)."""
        if self._renewer is not None and not self._renewing:
            self._renewing = True
            if time.monotonic() >= self.valid_until - self._interval:
                self._next_renewal = time.monotonic()  # registered late: renew at once
            self._renewer.add(self)

    async def stop(self) -> None:
        """Stop renewing; the lease stays in Redis until released or lapsed."""
        if self._renewer is not None and self._renewing:
            self._renewing = False
            self._renewer.remove(self)

    async def ready(self) -> bool:
        """Wait, if need be, until the lease is known to be this run's; whether it is.

        The renewal deadline runs from when the claim was *sent*. On a loop busy enough
        that the claim's reply was read late, the run may reach this point past its
        deadline although the lease still lives in Redis (for one TTL from the send, and
        nobody else can hold it meanwhile). The renewer renews a new lease at once,
        without judging it by that deadline: the run waits for that renewal before it
        acts, and goes on only if the lease was still its own."""
        if self._renewer is None or time.monotonic() < self.valid_until - self._interval:
            return self.locally_valid()
        lost = asyncio.ensure_future(self.lost.wait())
        first = asyncio.ensure_future(self._first_renewal.wait())
        try:
            await asyncio.wait({lost, first}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            first.cancel()
        return self.locally_valid()

    def ending(self) -> None:
        """The run is about to settle or release the lease itself: a renewal that finds
        it gone from now on lost nothing."""
        self._ending = True

    def renewed(self, sent_at: float, next_renewal: float) -> None:
        """A renewal sent at ``sent_at`` found the lease still this run's (renewer thread)."""
        if sent_at > self._renewed_at:
            self._renewed_at = sent_at
        self._next_renewal = next_renewal
        if not self._confirmed:
            self._confirmed = True
            self._on_loop(self._first_renewal.set)

    def retry_renewal_at(self, when: float) -> None:
        """A renewal failed (Redis unreachable): try again at ``when`` (renewer thread)."""
        self._next_renewal = when

    def lose_from_thread(self, why: str) -> None:
        """The renewer counts this lease lost (renewer thread), unless the run stopped
        renewing it or is settling: a lease its own run freed was not lost."""
        if not self._renewing or self._ending:
            return
        self._lost_here = True
        self._on_loop(self._lose, why)

    def cancel_from_thread(self) -> None:
        """The renewal read the task's durable cancel flag (renewer thread)."""
        self._on_loop(self.cancel_requested.set)

    def _on_loop(self, callback: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is left to tell
            self._loop.call_soon_threadsafe(callback, *args)

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
