"""Whether a Redis server has what LangGraph checkpoints need: the Query Engine and JSON.

langgraph-checkpoint-redis stores checkpoints as JSON documents and finds them with
search indexes: Redis 8 has both built in, Redis Stack loads them as modules. A plain
Redis (7.x, or a managed Redis without modules) has neither; a deployment pointed at one
would take tasks and never settle them. Workers refuse to start and callers refuse to
open sessions on such a server, with the message :func:`missing_modules` returns.

One probe (``FT._LIST`` and ``JSON.TYPE`` in one pipeline, one round trip) per client:
a client that passed it once is not probed again.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio

from .keys import MODULES_PROBE_KEY

__all__ = ["missing_modules", "missing_modules_sync", "redact_url"]

_PROBES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the Query Engine", ("FT._LIST",)),
    ("JSON", ("JSON.TYPE", MODULES_PROBE_KEY)),
)

_verified: weakref.WeakSet[Any] = weakref.WeakSet()


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _message(url: str, replies: Sequence[object]) -> str | None:
    lacking = [
        f"{what} ({str(reply)[:80].strip()})"
        for (what, _), reply in zip(_PROBES, replies, strict=True)
        if isinstance(reply, redis.ResponseError)
    ]
    if not lacking:
        return None
    return (
        f"Redis at {redact_url(url)} lacks {' and '.join(lacking)}, which LangGraph "
        "checkpoints need. Run Redis 8, or Redis Stack, or `ahp-celery redis` (an "
        "embedded Redis 8 with both), and point AHP_REDIS_URL (or AHP_CHECKPOINT_URL) at it."
    )


def _raise_other(replies: Sequence[object]) -> None:
    for reply in replies:
        if isinstance(reply, BaseException) and not isinstance(reply, redis.ResponseError):
            raise reply


async def missing_modules(client: redis.asyncio.Redis, url: str) -> str | None:
    """What ``client``'s server lacks, as the message to refuse with; ``None`` if nothing.

    Raises the client's connection errors (nothing is cached then)."""
    if client in _verified:
        return None
    async with client.pipeline(transaction=False) as pipe:
        for _, command in _PROBES:
            pipe.execute_command(*command)
        replies = await pipe.execute(raise_on_error=False)
    _raise_other(replies)
    message = _message(url, replies)
    if message is None:
        _verified.add(client)
    return message


def missing_modules_sync(client: redis.Redis, url: str) -> str | None:
    """:func:`missing_modules` for a synchronous client."""
    if client in _verified:
        return None
    with client.pipeline(transaction=False) as pipe:
        queue = cast("Callable[..., object]", pipe.execute_command)  # untyped in redis-py
        for _, command in _PROBES:
            queue(*command)
        replies = pipe.execute(raise_on_error=False)
    _raise_other(replies)
    message = _message(url, replies)
    if message is None:
        _verified.add(client)
    return message
