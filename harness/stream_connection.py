"""The stream reader's own connection: one blocking round trip at a time, which any task
can wake.

A round trip is one packed write (``CLIENT ID`` after every (re)connect, then the owed
marks' ``EVALSHA`` calls, then the read) and its replies in order: the marks cost no round
trip of their own, nor does learning the id that ``CLIENT UNBLOCK`` names. A read in
flight is woken with ``CLIENT UNBLOCK <id>`` sent on a pooled client, at most once per
read. Commands are packed by hand (RESP): the reader's pipeline is sent as bytes, not
encoded again by redis-py at every read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import RedisError, ResponseError

from .stream_subscriptions import Mark

log = logging.getLogger(__name__)

_UNBLOCK_PAUSE_CAP = 0.05
"""Seconds between attempts to unblock a read that has not reached Redis yet, at most."""

Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]
"""Runs background work (the runtime's ``spawn``: tracked, cancelled when it closes)."""


def bulk(text: str) -> bytes:
    """``text`` as a RESP bulk string."""
    data = text.encode()
    return b"$%d\r\n%b\r\n" % (len(data), data)


def command(*parts: str) -> bytes:
    """The RESP array of a command and its arguments."""
    return b"*%d\r\n%b" % (len(parts), b"".join(bulk(part) for part in parts))


_CLIENT_ID = command("CLIENT", "ID")


class ReaderConnection:
    """Sends the reader's round trips on ``connection``; wakes a blocked read through
    ``unblocker`` (a pooled client), with ``spawn``."""

    def __init__(self, connection: AbstractConnection, unblocker: Redis, spawn: Spawn) -> None:
        self.connection = connection
        """The reader's own connection (``decode_responses``)."""
        self._unblocker = unblocker
        self._spawn = spawn
        self._client_id: int | None = None
        self.generation = 0
        """The number of reads sent so far."""
        self._reading = 0
        """The read in flight (its generation; 0: none)."""
        self._unblocked = 0
        """The read an unblock was sent for."""
        connection.register_connect_callback(self._forget_id)  # type: ignore[no-untyped-call]

    async def exchange(
        self, marks: Sequence[Mark], read: bytes
    ) -> tuple[Any, list[ResponseError | None]]:
        """One round trip: ``CLIENT ID`` after a (re)connect, ``marks``, then ``read``.
        Returns the read's reply and each mark's error (``None``: it landed)."""
        connection = self.connection
        identify = self._client_id is None or not connection.is_connected
        commands = [_CLIENT_ID] if identify else []
        for mark in marks:
            commands.append(command("EVALSHA", mark.sha, str(len(mark.keys)), *mark.keys))
        commands.append(read)
        self.generation += 1
        self._reading = self.generation
        try:
            await connection.send_packed_command(commands, check_health=False)
            if identify:
                self._client_id = int(await connection.read_response())
            outcomes: list[ResponseError | None] = []
            for _ in marks:
                try:
                    await connection.read_response()
                    outcomes.append(None)
                except ResponseError as error:
                    outcomes.append(error)
            return await connection.read_response(), outcomes
        finally:
            self._reading = 0

    async def types(self, keys: Sequence[str]) -> list[str]:
        """The ``TYPE`` of each of ``keys`` (one round trip; ``""`` where it was refused)."""
        connection = self.connection
        await connection.send_packed_command(
            [command("TYPE", key) for key in keys], check_health=False
        )
        kinds: list[str] = []
        for _ in keys:
            try:
                kinds.append(str(await connection.read_response()))
            except ResponseError:
                kinds.append("")
        return kinds

    def wake(self) -> None:
        """Wake the blocked read, if one is in flight (once per read)."""
        reading = self._reading
        if reading and self._unblocked != reading:
            self._unblocked = reading
            self._spawn(self._unblock(reading))

    def _forget_id(self, connection: AbstractConnection) -> None:
        """On every (re)connect: the next read asks for the id ``CLIENT UNBLOCK`` names."""
        self._client_id = None

    async def _unblock(self, generation: int) -> None:
        """Wake read ``generation``; it then reads again, with every key. A read that has
        not reached Redis yet is not blocked: try again until it is, or has returned."""
        pause = 0.001
        try:
            while self._reading == generation:
                client_id = self._client_id
                if client_id is not None and await self._unblocker.client_unblock(client_id):
                    return
                await asyncio.sleep(pause)
                pause = min(pause * 2, _UNBLOCK_PAUSE_CAP)
        except RedisError as error:
            # The read returns by its block timeout anyway.
            log.info("could not unblock the task stream reader: %s", error)


__all__ = ["ReaderConnection", "Spawn", "bulk", "command"]
