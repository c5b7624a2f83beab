"""The interactions of tasks in the records: a paused run's questions, the caller's
answers, and the approvals granted for a session.

A run that stops at an interrupt pauses its task in one fenced step (its interactions
stored and announced, the lease released); a caller's response is recorded exactly once
and makes the task due for its resume (``respond.lua``). :class:`InteractionRecords` is
part of :class:`~wire.store.RecordStore`, on the same client and keys.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from . import scripts
from .keys import Keys
from .store_results import PauseResult, RespondResult, reply_text


class InteractionRecords:
    """The pause and respond scripts and the interaction reads (see the module docstring)."""

    redis: Redis
    keys: Keys
    retention_seconds: int
    """The record store's (``RecordStore`` sets them)."""

    def __init__(self, redis: Redis) -> None:
        self._pause: AsyncScript = redis.register_script(scripts.PAUSE)
        self._respond: AsyncScript = redis.register_script(scripts.RESPOND)

    async def pause(
        self,
        session_id: str,
        task_id: str,
        lease: str,
        usage_json: str,
        interactions: Sequence[tuple[str, str]],
    ) -> PauseResult:
        """The run stopped at an interrupt: store and announce ``interactions`` (id,
        payload JSON), put the task in ``awaiting_response`` and release the lease, in one
        fenced step (see ``pause.lua``)."""
        args: list[str] = [lease, task_id, usage_json]
        for interaction, payload in interactions:
            args.extend((interaction, payload))
        reply = await self._pause(
            keys=[
                self.keys.task(task_id),
                self.keys.lease(session_id),
                self.keys.events(task_id),
                self.keys.running(),
                self.keys.interactions(task_id),
                self.keys.responses(task_id),
            ],
            args=args,
        )
        return PauseResult(reply_text(reply[0]))

    async def respond(
        self,
        session_id: str,
        task_id: str,
        interaction_id: str,
        resolution_json: str,
        event_json: str,
        *,
        grant: bool = False,
        cancels: bool = False,
    ) -> tuple[RespondResult, str, str, str]:
        """Record the caller's response to a pending interaction, exactly once, and make
        the task due for its resume (see ``respond.lua``). ``cancels``: the response is a
        CANCEL decision, which cancels the task in the same step. Returns the result, its
        detail, and the outcome JSON and promoted task id when that settled the task."""
        reply = await self._respond(
            keys=[
                self.keys.task(task_id),
                self.keys.interactions(task_id),
                self.keys.responses(task_id),
                self.keys.events(task_id),
                self.keys.starting(),
                self.keys.grants(session_id),
                self.keys.session(session_id),
                self.keys.lease(session_id),
                self.keys.running(),
            ],
            args=[
                task_id,
                interaction_id,
                resolution_json,
                event_json,
                "1" if grant else "0",
                "1" if cancels else "0",
                self.retention_seconds,
            ],
        )
        values = [reply_text(item) for item in reply] + ["", "", ""]
        return RespondResult(values[0]), values[1], values[2], values[3]

    async def interactions(self, task_id: str) -> tuple[dict[str, str], dict[str, str]]:
        """The task's interactions (id: payload JSON) and their resolutions (id: JSON)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.interactions(task_id))
        pipe.hgetall(self.keys.responses(task_id))
        raised, resolved = await pipe.execute()
        return (
            {reply_text(k): reply_text(v) for k, v in raised.items()},
            {reply_text(k): reply_text(v) for k, v in resolved.items()},
        )

    async def granted(self, session_id: str, scope: str) -> bool:
        """Whether the caller approved ``scope`` for the rest of the session."""
        return bool(await self.redis.sismember(self.keys.grants(session_id), scope))


__all__ = ["InteractionRecords"]
