"""Deliver a caller's response to a pending interaction: one atomic script in Redis.

The delivery is the ``respond.lua`` script (``RecordStore.respond``): it checks the task
is awaiting and not cancelled and the interaction pending, records the response exactly
once and makes the task due for its resume. A Redis error on the way is classified by
``harness.redis_errors``: refused (the script surely did not run: the response can be
sent again) or unknown (it may have run: never send it again).

:class:`Responder` is the seam; the harness's ``RecordStore`` is the real one (its
``respond`` has this signature). Tests put a controlled responder in front of it
(``tests/support/response_control.py``).
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


ResponderFactory = Callable[[RecordStore], Responder]
"""Builds a harness's responder from its record store (default: the store itself)."""


__all__ = ["Responder", "ResponderFactory"]
