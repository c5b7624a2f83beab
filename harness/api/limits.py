"""The request body limit, enforced before anything parses the body.

A declared ``Content-Length`` above the limit is refused without being parsed; a body
without one (chunked) is refused at the first byte beyond the limit. Either way the
application never sees the body and nothing is written. Before answering, the rest of a
refused body is read and dropped, up to ``DRAIN_FACTOR`` times the limit: a server that
answers and closes while the client is still sending resets the connection, and the
client loses the 413 (a larger body is cut off and the connection closed). A body
within the limit is handed on unchanged; later ``receive`` calls reach the server's own,
so a client's disconnect is still seen (SSE, ``cancel_on_disconnect``).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .problems import ProblemError, ProblemType, too_large

DRAIN_FACTOR = 8


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self._app = app
        self._max = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        declared = declared_length(scope)
        if declared == -1:
            await _refuse(
                ProblemError(ProblemType.INVALID_REQUEST, 400, "Content-Length is not a number"),
                scope,
                send,
            )
            return
        if declared is not None and declared > self._max:
            if declared <= self._max * DRAIN_FACTOR:
                await _drain(receive, self._max * DRAIN_FACTOR)
            await _refuse(self._too_large(), scope, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client left before sending its body: nothing to run.
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max:
                if message.get("more_body", False):
                    await _drain(receive, self._max * DRAIN_FACTOR - size)
                await _refuse(self._too_large(), scope, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self._app(scope, replaying(b"".join(chunks), receive), send)

    def _too_large(self) -> ProblemError:
        return too_large(f"the request body exceeds the limit of {self._max} bytes")


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` that gives ``body`` (already read) once first, then the server's own
    messages (a client's disconnect is still seen)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _drain(receive: Receive, budget: int) -> None:
    """Read and drop the rest of a body, at most ``budget`` more bytes."""
    while budget > 0:
        message = await receive()
        if message["type"] != "http.request":
            return
        budget -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def declared_length(scope: Scope) -> int | None:
    """The declared length, ``None`` when absent, ``-1`` when malformed."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            if not text.isdigit():
                return -1
            return int(text)
    return None


async def _refuse(error: ProblemError, scope: Scope, send: Send) -> None:
    response = error.response(scope.get("path"))
    response.headers["Connection"] = "close"

    async def ignore() -> Message:
        return {"type": "http.disconnect"}

    await response(scope, ignore, send)


__all__ = ["BodyLimit", "declared_length", "replaying"]
