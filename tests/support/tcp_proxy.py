"""A TCP proxy between one worker process and Redis, for partitions and stalled writes.

The proxy runs its own event loop in a thread. Every connection the worker opens goes
through it, so the test can:

- ``cut()`` / ``heal()``: stop forwarding in both directions on every connection (a network
  partition: the bytes wait, nothing is reset) and resume;
- ``freeze_when(*markers)``: hold the client-to-server bytes of the first connection whose
  outgoing traffic contains every marker (e.g. a checkpoint write carrying a given answer),
  report it (``frozen``), and later ``thaw()`` it; ``answered`` tells when Redis replied on
  that connection after the thaw, i.e. when the held command was executed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

_WINDOW = 1 << 20


class _Link:
    """One proxied connection."""

    def __init__(self) -> None:
        self.outgoing = bytearray()  # recent client-to-server bytes, for marker matching
        self.frozen = False
        self.replied_after_thaw = 0


class TcpProxy:
    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        self._upstream_url = parts
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._open: asyncio.Event | None = None
        self._thawed: asyncio.Event | None = None
        self._markers: tuple[bytes, ...] = ()
        self._frozen_link: _Link | None = None
        self.frozen = threading.Event()
        self.answered = threading.Event()
        self.port = 0

    # -- control (from the test's thread) --------------------------------------------------
    @property
    def url(self) -> str:
        netloc = f"127.0.0.1:{self.port}"
        parts = self._upstream_url
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def cut(self) -> None:
        self._call(lambda: self._event(self._open).clear())

    def heal(self) -> None:
        self._call(lambda: self._event(self._open).set())

    def freeze_when(self, *markers: bytes) -> None:
        def arm() -> None:
            self._markers = markers

        self._call(arm)

    def thaw(self) -> None:
        self._call(lambda: self._event(self._thawed).set())

    def _call(self, action: object) -> None:
        async def run() -> None:
            action()  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    @staticmethod
    def _event(event: asyncio.Event | None) -> asyncio.Event:
        assert event is not None
        return event

    # -- inside the proxy's loop -------------------------------------------------------------
    async def _start(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._thawed = asyncio.Event()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.close()
            return
        link = _Link()
        await asyncio.gather(
            self._pump(reader, up_writer, link, outgoing=True),
            self._pump(up_reader, writer, link, outgoing=False),
            return_exceptions=True,
        )

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        link: _Link,
        *,
        outgoing: bool,
    ) -> None:
        open_ = self._event(self._open)
        thawed = self._event(self._thawed)
        try:
            while True:
                chunk = await source.read(65536)
                if not chunk:
                    break
                if outgoing and not link.frozen and self._markers and self._frozen_link is None:
                    link.outgoing += chunk
                    del link.outgoing[:-_WINDOW]
                    if all(marker in link.outgoing for marker in self._markers):
                        link.frozen = True
                        self._frozen_link = link
                        self.frozen.set()
                elif outgoing and not link.frozen:
                    link.outgoing += chunk
                    del link.outgoing[:-_WINDOW]
                if outgoing and link.frozen:
                    await thawed.wait()
                if not outgoing and link.frozen and thawed.is_set():
                    link.replied_after_thaw += len(chunk)
                    self.answered.set()
                await open_.wait()
                sink.write(chunk)
                with contextlib.suppress(ConnectionError):
                    await sink.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            # Bytes held for a frozen link are still delivered (above) before the close;
            # a half-close lets the server's reply to them come back.
            with contextlib.suppress(Exception):
                if outgoing and sink.can_write_eof():
                    sink.write_eof()
                else:
                    sink.close()


@contextmanager
def proxy_to(upstream_url: str) -> Iterator[TcpProxy]:
    proxy = TcpProxy(upstream_url)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
