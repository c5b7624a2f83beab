"""A TCP proxy between an HTTP client and the API whose connections a test can drop.

It runs its own event loop in a thread. ``drop()`` aborts every open connection on both
sides at once (what a network drop or a proxy's idle cut does to a streamed response), so
a client's automatic reconnect can be observed. Each connection keeps the first bytes it
carried each way (``requests`` and ``responses``): the request line and headers a
reconnecting client sent, and whether a response's headers had already arrived.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_KEPT = 4096


@dataclass
class _Connection:
    request: bytearray = field(default_factory=bytearray)
    response: bytearray = field(default_factory=bytearray)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)


class DroppingProxy:
    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._connections: list[_Connection] = []
        self._lock = threading.Lock()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[bytes]:
        """The first bytes each connection sent to the API, in the order they opened."""
        with self._lock:
            return [bytes(c.request) for c in self._connections]

    @property
    def responses(self) -> list[bytes]:
        """The first bytes the API sent back on each connection."""
        with self._lock:
            return [bytes(c.response) for c in self._connections]

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def drop(self) -> None:
        """Abort every open connection, both sides, now."""

        async def abort() -> None:
            with self._lock:
                writers = [w for c in self._connections for w in c.writers]
            for writer in writers:
                writer.transport.abort()

        asyncio.run_coroutine_threadsafe(abort(), self._loop).result(10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        with self._lock:
            writers = [w for c in self._connections for w in c.writers]
        for writer in writers:
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = _Connection(writers=[writer])
        with self._lock:
            self._connections.append(connection)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.transport.abort()
            return
        connection.writers.append(upstream_writer)
        await asyncio.gather(
            self._pump(reader, upstream_writer, connection.request),
            self._pump(upstream_reader, writer, connection.response),
        )

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, kept: bytearray
    ) -> None:
        try:
            while data := await reader.read(65536):
                with self._lock:
                    if len(kept) < _KEPT:
                        kept.extend(data[: _KEPT - len(kept)])
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            # A graceful close: what was written still goes out (``drop`` aborts instead).
            writer.close()


@contextmanager
def dropping_proxy(upstream_url: str) -> Iterator[DroppingProxy]:
    proxy = DroppingProxy(upstream_url)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
