"""One reader of every task stream a caller follows, on one connection of its own.

A caller process follows its tasks' Redis Streams through one :class:`StreamReader` (one
per ``CallerRuntime``): one loop sends ``XREAD COUNT 1024 BLOCK 2000 STREAMS k1 k2 ...
id1 id2 ...`` over every followed key on one dedicated connection (not a pooled one) and
hands each stream's entries, in order, to that key's subscriptions. Its connections do
not grow with the number of followed tasks, and an idle followed task costs no round
trip of its own.

* A subscription that needs a read (a new key, an earlier position, a mark) while the
  read blocks wakes it with ``CLIENT UNBLOCK <id>``, sent on a pooled connection, at most
  one per blocked read: a new key's first read never waits for the block timeout. The
  reader's id is asked with ``CLIENT ID`` in front of the first read after every
  (re)connect (no round trip of its own; ``harness.stream_connection``).
* A subscription receives every entry after the id it started from, once, in stream
  order. Subscriptions of one key share its read, from the earliest of their positions.
* A :class:`Mark` (a script call a subscription owes, such as the confirmation of a
  task's publish) is pipelined in front of the next read until it lands: it costs no
  round trip of its own. After a ``NOSCRIPT`` (a restarted Redis) one owed mark runs on a
  pooled connection, which loads the script for the others.
* Redis unreachable: the reader reconnects with backoff (``wire.backoff.Outage``) and
  reads on from every subscription's position. A subscription is *lost* only once Redis
  has been unreachable for its own ``window`` (counted from when it began following, if
  that was later than the outage's start).
* ``XREAD`` over many keys fails as a whole when one of them is not a stream
  (``WRONGTYPE``): the reader asks for the ``TYPE`` of every key (one round trip) and
  fails only the culprits' subscriptions. A follower whose callback raises (an entry it
  cannot decode) is failed alone too.

The packed command is cached (``harness.followed_keys``): a read costs joining the encoded
keys and ids, not encoding every argument again.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncGenerator, Coroutine
from datetime import timedelta
from typing import Any

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import NoScriptError, RedisError, ResponseError

from wire.backoff import CONNECTION_ERRORS, Outage
from wire.redis_options import pool_options

from .followed_keys import BLOCK, FollowedKeys
from .stream_connection import ReaderConnection, Spawn
from .stream_subscriptions import Follower, Inbox, Mark, StreamEntry, Subscription, comes_after

log = logging.getLogger(__name__)

_FIRST_DELAY = timedelta(milliseconds=50)
_MAX_DELAY = timedelta(seconds=2)
_ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


def _fields(raw: Any) -> dict[str, str]:
    if isinstance(raw, dict):
        return raw
    if not raw:
        return {}
    values = iter(raw)
    return dict(zip(values, values, strict=False))


class StreamReader:
    """Reads every followed stream on ``connection``; unblocks its reads through
    ``unblocker`` (a pooled client); runs its loop with ``spawn`` (lazily, at the first
    subscription)."""

    def __init__(
        self, connection: AbstractConnection, unblocker: Redis, spawn: Spawn | None = None
    ) -> None:
        self.connection = connection
        """The reader's own connection (``decode_responses``)."""
        self._spawn: Spawn = spawn if spawn is not None else self._spawn_own
        self._link = ReaderConnection(connection, unblocker, self._spawn)
        """Its round trips on ``connection``, and the waking of a blocked read."""
        self._own: set[asyncio.Task[Any]] = set()
        self._followed = FollowedKeys()
        self._owed: dict[Subscription, None] = {}
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._down_since: float | None = None
        self._closed = False

    @classmethod
    def open(cls, url: str, unblocker: Redis, spawn: Spawn, **options: Any) -> StreamReader:
        """A reader on a new connection to ``url`` (``options``: redis-py connection
        options, such as ``client_name``)."""
        pool = ConnectionPool.from_url(url, decode_responses=True, **options, **pool_options())
        connection: AbstractConnection = pool.make_connection()  # type: ignore[no-untyped-call]
        return cls(connection, unblocker, spawn)

    @classmethod
    def beside(cls, client: Redis) -> StreamReader:
        """A reader of its own on a connection made as ``client``'s pool makes them,
        unblocked through ``client``; its owner closes it (``aclose``)."""
        pool = client.connection_pool
        options = {**pool.connection_kwargs, "decode_responses": True}
        return cls(pool.connection_class(**options), client)

    @property
    def followed(self) -> int:
        """How many keys the reader follows."""
        return len(self._followed)

    def subscribe(
        self, key: str, after: str, follower: Follower, mark: Mark | None = None
    ) -> Subscription:
        """Follow ``key`` from the entry after ``after`` (``0-0``: from its first); with
        ``mark``, owe that script call until it lands.

        Raises:
            ValueError: ``after`` is not a stream entry id.
            RuntimeError: the reader is closed.
        """
        if self._closed:
            raise RuntimeError("the stream reader is closed")
        if _ENTRY_ID.fullmatch(after) is None:
            raise ValueError(f"not a stream entry id: {after!r}")
        joined = asyncio.get_running_loop().time()
        subscription = Subscription(self, key, follower, after, joined, mark)
        stream = self._followed.get(key)
        needs_read = stream is None or mark is not None
        if stream is None:
            stream = self._followed.add(key, after, self._link.generation)
        elif comes_after(stream.cursor, after):
            self._followed.move(stream, after)
            stream.changed = self._link.generation
            needs_read = True
        stream.subscriptions.append(subscription)
        if mark is not None:
            self._owed[subscription] = None
        if needs_read:
            self._changed()
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = self._spawn(self._run())
        return subscription

    async def follow(
        self, key: str, after: str, *, idle: timedelta = BLOCK, capacity: int = 64
    ) -> AsyncGenerator[tuple[StreamEntry, ...], None]:
        """The entries of ``key`` after ``after``, one read at a time, and ``()`` after
        each ``idle`` without any. The first Redis error ends it: it raises that error
        (Redis unreachable, the key not a stream).

        At most ``capacity`` reads wait here for a slow consumer; past them the
        subscription pauses, and resumes from the last entry taken once they are."""
        inbox = Inbox(capacity)
        last = after
        inbox.subscription = self.subscribe(key, last, inbox.follower)
        try:
            while True:
                if inbox.reads:
                    read = inbox.reads.popleft()
                    last = read[-1][0]
                    yield read
                elif inbox.error is not None:
                    raise inbox.error
                elif inbox.paused:
                    inbox.paused = False
                    inbox.subscription = self.subscribe(key, last, inbox.follower)
                elif not await inbox.wait(idle.total_seconds()):
                    yield ()
        finally:
            inbox.close()

    async def aclose(self) -> None:
        """Stop reading and close the connection; subscribing afterwards is refused."""
        self._closed = True
        tasks = set(self._own)
        if self._loop_task is not None:
            tasks.add(self._loop_task)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1)
        await self.connection.disconnect()

    # -- the loop -----------------------------------------------------------------------
    async def _run(self) -> None:
        outage = Outage("task stream reader", first=_FIRST_DELAY, cap=_MAX_DELAY, logger=log)
        while True:
            if not self._followed:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self._read_once(outage)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a defect: its subscriptions end, the loop goes on
                log.exception("the task stream reader failed; its subscriptions end")
                for subscription in self._followed.subscriptions():
                    self._fail(subscription, error)

    async def _read_once(self, outage: Outage) -> None:
        owed = tuple(subscription for subscription in self._owed if subscription.mark)
        generation = self._link.generation + 1
        try:
            reply, outcomes = await self._exchange(owed)
        except CONNECTION_ERRORS as error:
            await self._wait_out(outage, error)
            return
        except ResponseError as error:
            self._reachable(outage)
            await self._isolate(error, outage)
            return
        self._reachable(outage)
        self._dispatch(reply, generation)
        await self._settle_marks(owed, outcomes)

    async def _exchange(
        self, owed: tuple[Subscription, ...]
    ) -> tuple[Any, list[ResponseError | None]]:
        """One round trip: the owed marks, then the read of every followed key. Returns the
        read's reply and each mark's error (``None``: it landed)."""
        marks: list[Mark] = []
        for subscription in owed:
            mark = subscription.mark
            assert mark is not None
            marks.append(mark)
        return await self._link.exchange(marks, self._followed.read_command())

    def _dispatch(self, reply: Any, generation: int) -> None:
        if not reply:
            return  # timed out, or unblocked
        streams = reply.items() if isinstance(reply, dict) else reply
        for key, raw in streams:
            stream = self._followed.get(key)
            if stream is None or not raw or stream.changed >= generation:
                continue
            entries = [(entry_id, _fields(fields)) for entry_id, fields in raw]
            previous = stream.cursor
            self._followed.move(stream, entries[-1][0])
            for subscription in tuple(stream.subscriptions):
                self._deliver(subscription, entries, previous)

    def _deliver(
        self, subscription: Subscription, entries: list[StreamEntry], previous: str
    ) -> None:
        if subscription.closed:
            return
        if subscription.last != previous:  # it started later than the key's read
            entries = [entry for entry in entries if comes_after(entry[0], subscription.last)]
            if not entries:
                return
        subscription.last = entries[-1][0]
        try:
            subscription.follower.entries(entries)
        except Exception as error:
            self._fail(subscription, error)

    async def _settle_marks(
        self, owed: tuple[Subscription, ...], outcomes: list[ResponseError | None]
    ) -> None:
        reloaded = False
        for subscription, error in zip(owed, outcomes, strict=True):
            mark = subscription.mark
            if subscription.closed or mark is None:
                continue
            failure: BaseException | None = error
            if isinstance(error, NoScriptError):
                if reloaded:
                    continue  # the script is loaded now: the next read carries it again
                reloaded = True
                try:
                    await mark.run()
                    failure = None
                except RedisError as again:
                    failure = again
            if failure is None:
                subscription.mark = None
                self._owed.pop(subscription, None)
            else:
                # Owed until it lands (e.g. refused at maxmemory); the reads go on.
                log.warning("%s failed: %s", mark.what, failure)

    # -- outages and failures -----------------------------------------------------------
    async def _wait_out(self, outage: Outage, error: BaseException) -> None:
        """Lose the subscriptions whose window has passed; back off until the next try
        (or until the next window ends, whichever is first)."""
        now = asyncio.get_running_loop().time()
        if self._down_since is None:
            self._down_since = now
        pause: float | None = None
        for subscription in self._followed.subscriptions():
            if subscription.closed:  # ended by another follower's callback meanwhile
                continue
            elapsed = now - max(self._down_since, subscription.joined)
            left = subscription.follower.window - elapsed
            if left <= 0:
                subscription.close()
                try:
                    subscription.follower.lost(elapsed, error)
                except Exception:
                    log.exception("a stream follower failed on its loss")
            elif pause is None or left < pause:
                pause = left
        try:
            async with asyncio.timeout(pause):
                await outage.back_off(error)
        except TimeoutError:
            pass

    def _reachable(self, outage: Outage) -> None:
        self._down_since = None
        outage.recovered()

    async def _isolate(self, error: ResponseError, outage: Outage) -> None:
        """The read failed as a whole: fail the subscriptions of each key that is not a
        stream; an error no key explains is waited out like an outage."""
        keys = self._followed.keys()
        try:
            kinds = await self._link.types(keys)
        except CONNECTION_ERRORS as failure:
            await self._wait_out(outage, failure)
            return
        culprits = [key for key, kind in zip(keys, kinds, strict=True) if kind not in _READABLE]
        if not culprits:
            await self._wait_out(outage, error)
            return
        for key in culprits:
            stream = self._followed.get(key)
            for subscription in tuple(stream.subscriptions if stream is not None else ()):
                self._fail(subscription, error)

    def _fail(self, subscription: Subscription, error: BaseException) -> None:
        if subscription.closed:
            return
        subscription.close()
        try:
            subscription.follower.failed(error)
        except Exception:
            log.exception("a stream follower failed on its failure")

    # -- bookkeeping --------------------------------------------------------------------
    def _changed(self) -> None:
        """A read is needed: start one, or wake the blocked one (once per read)."""
        self._wake.set()
        self._link.wake()

    def _unsubscribe(self, subscription: Subscription) -> None:
        if subscription.closed:
            return
        subscription.closed = True
        self._owed.pop(subscription, None)
        stream = self._followed.get(subscription.key)
        if stream is None or subscription not in stream.subscriptions:
            return
        stream.subscriptions.remove(subscription)
        if not stream.subscriptions:
            self._followed.remove(subscription.key, stream)

    def _spawn_own(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(work)
        self._own.add(task)
        task.add_done_callback(self._own.discard)
        return task


_READABLE = frozenset({"stream", "none"})
"""Key types an ``XREAD`` accepts (a missing key is waited on)."""


__all__ = [
    "Follower",
    "Mark",
    "StreamEntry",
    "StreamReader",
    "Subscription",
    "comes_after",
]
