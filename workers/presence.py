"""Each worker process reports itself (``wire.presence``): the queues it consumes, its
run slots and its runs in flight, every ``REPORT_INTERVAL``, from a daemon thread with a
connection of its own (a busy event loop does not delay a report, and a report never
waits on the loop). The report and its member of ``Keys.workers`` are written in one
step; the report lapses after ``PRESENCE_TTL`` if the process dies, and is deleted when
it stops."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence

from redis import Redis
from redis.exceptions import RedisError

from wire.keys import Keys
from wire.presence import PRESENCE_TTL, REPORT_INTERVAL, WorkerPresence
from wire.redis_options import pool_options

log = logging.getLogger(__name__)


def process_name(node: str | None = None) -> str:
    """``<node name>/<pid>`` (the node: Celery's hostname, else this host's name)."""
    return f"{node or socket.gethostname()}/{os.getpid()}"


class PresenceReporter:
    """Reports one worker process; :meth:`start` once, :meth:`stop` when it stops."""

    def __init__(
        self,
        redis_url: str,
        keys: Keys,
        *,
        name: str,
        queues: Sequence[str],
        slots: int,
        in_flight: Callable[[], int],
        interval: float = REPORT_INTERVAL.total_seconds(),
    ) -> None:
        self._keys = keys
        self._name = name
        self._queues = tuple(queues)
        self._slots = slots
        self._in_flight = in_flight
        self._interval = interval
        self._client = Redis.from_url(redis_url, socket_timeout=2, **pool_options())
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self._name

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="ahp-presence", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop reporting and withdraw the report (a failure leaves it to lapse)."""
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)
        try:
            with self._client.pipeline(transaction=True) as pipe:
                pipe.zrem(self._keys.workers(), self._name)
                pipe.delete(self._keys.worker_presence(self._name))
                pipe.execute()
        except RedisError as error:
            log.warning(
                "worker %s: withdrawing its presence failed (it lapses): %s", self._name, error
            )
        self._client.close()

    def report(self) -> None:
        """Write the report now (the thread calls it every interval)."""
        now_ms = int(time.time() * 1000)
        presence = WorkerPresence(
            name=self._name,
            queues=self._queues,
            slots=self._slots,
            in_flight=self._in_flight(),
            seen_ms=now_ms,
        )
        ttl_ms = int(PRESENCE_TTL.total_seconds() * 1000)
        with self._client.pipeline(transaction=True) as pipe:
            pipe.set(self._keys.worker_presence(self._name), presence.model_dump_json(), px=ttl_ms)
            pipe.zadd(self._keys.workers(), {self._name: now_ms})
            pipe.execute()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                self.report()
            except RedisError as error:  # Redis away: the next interval tries again
                log.debug("worker %s: presence report failed: %s", self._name, error)
            self._stopping.wait(self._interval)


__all__ = ["PresenceReporter", "process_name"]
