"""One renewer per worker process: every live run's session lease, renewed in one
pipelined round trip from a thread of its own.

A worker process carries hundreds of runs on one event loop. If each run renewed its
own lease from that loop, a loop busy with the runs' own work (model chunks, event
appends, checkpoint writes) would delay the renewals, and a lease whose renewal is late
counts as lost: its run stops and another worker runs the task again, which is a
duplicate model call made of load alone. So renewals never touch the loop:

- **its own thread and connection**: a synchronous redis-py client with one connection,
  in a daemon thread; the loop's lag, the runs' connection pool and the GIL held by the
  loop (released at least every switch interval) cannot hold a renewal back for long;
- **one round trip for all**: every lease due within half a renewal interval is renewed
  by one ``EVALSHA renew_many`` (``wire/lua/renew_many.lua``: each lease extended if still
  its run's, and each task's durable cancel flag read), per 500 leases, pipelined;
- **the same deadline as before**: a lease not renewed within ``ttl / 2`` of the last
  renewal that succeeded (counted from when that renewal was *sent*) counts as lost here
  before it could lapse in Redis; the thread also wakes at each lease's deadline, so a
  lease is declared lost on time even while Redis does not answer;
- what it learns reaches the run on the loop through ``call_soon_threadsafe``; the
  lease's own checks (``SessionLease.locally_valid``) read the renewal time directly.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from redis import Redis
from redis.exceptions import NoScriptError, RedisError

from wire import scripts
from wire.keys import Keys
from wire.redis_options import pool_options

if TYPE_CHECKING:
    from .lease import SessionLease

log = logging.getLogger(__name__)

BATCH = 500
"""Leases renewed by one script call (a few thousand Redis calls: about a millisecond)."""
RETRY_PAUSE = 0.2
"""Seconds before a renewal that failed (Redis unreachable) is tried again."""


@dataclass(frozen=True, slots=True)
class Renewal:
    """What one renewal of one lease answered."""

    held: bool
    cancel_requested: bool


class LeaseRenewer:
    """Renews the session leases of one worker process; see the module docstring.

    Thread-safe: :meth:`add` and :meth:`remove` are called from the loop, the renewals
    run in the renewer's thread."""

    def __init__(self, redis_url: str, keys: Keys, ttl: timedelta) -> None:
        seconds = ttl.total_seconds()
        self._keys = keys
        self._ttl_ms = int(seconds * 1000)
        self._interval = max(seconds / 6, 0.02)
        # A reply later than a quarter of the TTL could not save a lease anyway.
        timeout = max(seconds / 4, 0.05)
        self._client = Redis.from_url(
            redis_url,
            decode_responses=True,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            health_check_interval=0,
            **pool_options(),
        )
        self._sha = hashlib.sha1(scripts.RENEW_MANY.encode()).hexdigest()
        self._leases: dict[int, SessionLease] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.round_trips = 0
        """Pipelines sent so far (for tests and metrics)."""

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name="ahp-lease-renewer", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop renewing (the leases still held lapse or are released by their runs)."""
        self._stopping.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)
        self._client.close()

    def add(self, lease: SessionLease) -> None:
        with self._lock:
            self._leases[id(lease)] = lease
        self._wake.set()

    def remove(self, lease: SessionLease) -> None:
        with self._lock:
            self._leases.pop(id(lease), None)

    # -- the thread --------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                pause = self._tick()
            except Exception:  # never let the thread die: every lease would lapse
                log.exception("lease renewer: unexpected error; retrying")
                pause = RETRY_PAUSE
            self._wake.wait(max(pause, 0.001))
            self._wake.clear()

    def _tick(self) -> float:
        """Renew what is due, declare lost what passed its deadline; seconds to sleep."""
        with self._lock:
            leases = tuple(self._leases.values())
        now = time.monotonic()
        due: list[SessionLease] = []
        for lease in leases:
            if lease.lost_here:
                self.remove(lease)
            elif not lease.confirmed and now >= lease.lapses_by:
                lease.lose_from_thread("no renewal succeeded within its TTL")
                self.remove(lease)
            elif lease.confirmed and now >= lease.valid_until:
                lease.lose_from_thread("no renewal succeeded before its deadline")
                self.remove(lease)
            elif now >= lease.next_renewal - self._interval / 2:
                due.append(lease)
        if due:
            self._renew(due)
        # A tick every quarter interval renews, in one round trip, every lease due
        # within half an interval: each lease every half to whole interval, and few
        # round trips however many leases. A deadline comes first if it is nearer.
        with self._lock:
            leases = tuple(self._leases.values())
        pause = self._interval / 4
        if leases:
            now = time.monotonic()
            nearest = min(
                lease.valid_until if lease.confirmed else lease.lapses_by for lease in leases
            )
            pause = min(pause, nearest - now)
        return pause

    def _renew(self, leases: Sequence[SessionLease]) -> None:
        sent_at = time.monotonic()
        replies = self._send(leases)
        self.round_trips += 1
        took = time.monotonic() - sent_at
        if took > self._interval:
            log.warning("lease renewer: renewing %d leases took %.3f s", len(leases), took)
        for lease, reply in zip(leases, replies, strict=True):
            if isinstance(reply, BaseException):
                log.warning(
                    "task %s could not renew its lease (%s); retrying", lease.task_id, reply
                )
                lease.retry_renewal_at(time.monotonic() + min(RETRY_PAUSE, self._interval))
                continue
            if not reply.held:
                lease.lose_from_thread("the lease is no longer this run's")
                self.remove(lease)
                continue
            lease.renewed(sent_at, sent_at + self._interval)
            if reply.cancel_requested:
                lease.cancel_from_thread()

    def _send(self, leases: Sequence[SessionLease]) -> list[Renewal | BaseException]:
        """One ``EVALSHA renew_many`` per ``BATCH`` leases, pipelined: one round trip and
        little Python work in this thread, which shares the GIL with a busy loop."""
        for attempt in range(2):
            pipe = self._client.pipeline(transaction=False)
            for start in range(0, len(leases), BATCH):
                batch = leases[start : start + BATCH]
                keys: list[str] = []
                for lease in batch:
                    keys += (self._keys.lease(lease.session_id), self._keys.task(lease.task_id))
                pipe.evalsha(
                    self._sha, len(keys), *keys, self._ttl_ms, *(lease.value for lease in batch)
                )
            try:
                raw: list[Any] = pipe.execute(raise_on_error=False)
            except RedisError as error:
                return [error] * len(leases)
            if attempt == 0 and any(isinstance(reply, NoScriptError) for reply in raw):
                try:
                    self._client.script_load(scripts.RENEW_MANY)  # Redis restarted: load, resend
                except RedisError as error:
                    return [error] * len(leases)
                continue
            renewals: list[Renewal | BaseException] = []
            for start, reply in zip(range(0, len(leases), BATCH), raw, strict=True):
                size = len(leases[start : start + BATCH])
                if isinstance(reply, BaseException):
                    renewals += [reply] * size
                else:
                    renewals += [
                        Renewal(bool(int(reply[2 * i])), (reply[2 * i + 1] or "") == "1")
                        for i in range(size)
                    ]
            return renewals
        raise AssertionError("unreachable")  # pragma: no cover


__all__ = ["BATCH", "RETRY_PAUSE", "LeaseRenewer", "Renewal"]
