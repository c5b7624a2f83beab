"""Deliver a caller's response to a pending interaction: one atomic script in Redis.

The delivery is the ``respond.lua`` script (``RecordStore.respond``): it checks the task
is awaiting and not cancelled and the interaction pending, records the response exactly
once and makes the task due for its resume. A Redis error on the way is classified by
``harness.redis_errors``: refused (the script surely did not run: the response can be
sent again) or unknown (it may have run: never send it again).

:class:`Responder` is the seam; :class:`StoreResponder` is the real one. Tests put a
controlled responder in front of the real one (``tests/support/response_control.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from wire.store import RecordStore, RespondResult


class Responder(Protocol):
    async def respond(
        self,
        session_id: str,
        task_id: str,
        interaction_id: str,
        resolution_json: str,
        event_json: str,
        *,
        grant: bool,
        cancels: bool,
    ) -> tuple[RespondResult, str, str, str]:
        """Run the respond script; raises the Redis error of a failed delivery."""
        ...


class StoreResponder:
    def __init__(self, store: RecordStore) -> None:
        self._store = store

    async def respond(
        self,
        session_id: str,
        task_id: str,
        interaction_id: str,
        resolution_json: str,
        event_json: str,
        *,
        grant: bool,
        cancels: bool,
    ) -> tuple[RespondResult, str, str, str]:
        return await self._store.respond(
            session_id,
            task_id,
            interaction_id,
            resolution_json,
            event_json,
            grant=grant,
            cancels=cancels,
        )


ResponderFactory = Callable[[RecordStore], Responder]
"""Builds a harness's responder from its record store (default: :class:`StoreResponder`)."""


__all__ = ["Responder", "ResponderFactory", "StoreResponder"]
