"""The Server-Sent Events response of the streaming routes.

sse-starlette's ``EventSourceResponse`` runs four tasks per response in an anyio task
group (the stream, pings, disconnect and shutdown watchers) and a cancel scope around
every send, and it ends the response with a separate empty write after the last event.
A client that stops reading at the terminal event (as most do: the stream ends there)
then leaves that write unread, and its HTTP library closes the connection instead of
reusing it. On the benchmark machine that made about half of the streams open a new
connection, and the response's machinery cost more than its events
(``bench/http_vs_harness.py``).

``EventStream`` keeps what matters of it with one helper task per response:

- **the end in the same write as the terminal event:** the body yields ``FinalChunk``
  for its last chunk, which goes out with the end of the response (``more_body=False``:
  one socket write, and the client sees the response complete with the event);
- **disconnects:** a watcher receives the request's messages; a disconnect stops the
  stream (the body iterator is closed, so its ``finally`` runs, e.g. a cancel on
  disconnect);
- **keep-alive pings:** a comment after ``ping`` seconds without a write, for proxies
  that close idle connections;
- **shutdown:** when the server is told to exit (sse-starlette's ``AppStatus``, which its
  import hooks into uvicorn), open streams end (resumable with ``Last-Event-ID``), so
  the server is not held open by them.

Events are encoded as sse-starlette writes them (``harness.api.events.sse_event``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta

from sse_starlette.sse import AppStatus
from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

PING_INTERVAL = timedelta(seconds=15)
"""A comment after this long without a write (sse-starlette's default)."""
_TICK = 1.0
"""How often an idle stream looks at the server's exit flag and its ping deadline."""
PING = b": ping\r\n\r\n"


class FinalChunk(bytes):
    """The last chunk of a stream (its terminal event): sent with the end of the
    response, in the same write."""


class EventStream(Response):
    """A ``text/event-stream`` response of the chunks ``content`` yields (see the module
    docstring); the iterator is always closed when the response ends."""

    media_type = "text/event-stream"

    def __init__(
        self,
        content: AsyncIterator[bytes],
        *,
        headers: Mapping[str, str] | None = None,
        status_code: int = 200,
        ping: timedelta = PING_INTERVAL,
        background: BackgroundTask | None = None,
    ) -> None:
        self.body_iterator = content
        self.status_code = status_code
        self.background = background
        self.ping = ping.total_seconds()
        self.init_headers(
            {
                "Cache-Control": "no-store",
                "Connection": "keep-alive",
                "X-Accel-Buffering": "no",
                **(headers or {}),
            }
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            start = {"type": "http.response.start", "status": self.status_code}
            await send({**start, "headers": self.raw_headers})
            if scope.get("method") == "HEAD":
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await _Stream(self.body_iterator, send, self.ping).run(receive)
        finally:
            # Closed whatever happened (a generator left at a yield keeps its finally
            # blocks pending until closed).
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        if self.background is not None:
            await self.background()


class _Stream:
    """One response's stream: this task sends the chunks; a watcher task receives the
    request's messages (a disconnect), sends pings and watches for the server's exit,
    and stops this task when the stream must end early."""

    def __init__(self, chunks: AsyncIterator[bytes], send: Send, ping: float) -> None:
        self._chunks = chunks
        self._send = send
        self._ping = ping
        self._lock = asyncio.Lock()
        self._written = time.monotonic()
        self._finished = False
        self._stopped_by_watcher = False
        self._ending = False
        """The watcher stopped the stream for the server's exit (the response is then
        ended properly) rather than for a disconnect (the client is gone)."""

    async def run(self, receive: Receive) -> None:
        me = asyncio.current_task()
        assert me is not None
        watcher = asyncio.get_running_loop().create_task(self._watch(receive, me))
        try:
            await self._relay()
        except asyncio.CancelledError:
            # Only the watcher's own stop is absorbed: any other cancellation (the
            # server's) goes on.
            if not self._stopped_by_watcher or me.uncancel() > 0:
                raise
            if self._ending:
                await self._write(b"", more=False)
        finally:
            self._finished = True
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _relay(self) -> None:
        async for chunk in self._chunks:
            if isinstance(chunk, FinalChunk):
                await self._write(chunk, more=False)
                return
            await self._write(chunk, more=True)
        await self._write(b"", more=False)

    async def _write(self, body: bytes, *, more: bool) -> None:
        async with self._lock:
            if not more:
                self._finished = True
            await self._send({"type": "http.response.body", "body": body, "more_body": more})
            self._written = time.monotonic()

    async def _watch(self, receive: Receive, stream: asyncio.Task[None]) -> None:
        while True:
            try:
                async with asyncio.timeout(min(_TICK, self._ping) if self._ping > 0 else _TICK):
                    message = await receive()
            except TimeoutError:
                if AppStatus.should_exit:
                    self._stop(stream, ending=True)
                    return
                if self._ping > 0 and time.monotonic() - self._written >= self._ping:
                    async with self._lock:
                        if self._finished:
                            return
                        await self._send(
                            {"type": "http.response.body", "body": PING, "more_body": True}
                        )
                        self._written = time.monotonic()
                continue
            if message["type"] == "http.disconnect":
                self._stop(stream, ending=False)
                return

    def _stop(self, stream: asyncio.Task[None], *, ending: bool) -> None:
        if self._finished:
            return
        self._stopped_by_watcher = True
        self._ending = ending
        stream.cancel()


__all__ = ["PING_INTERVAL", "EventStream", "FinalChunk"]
