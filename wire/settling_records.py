"""The end of a task in the records: settle, finish, cancel, release, hand back.

Every way a task ends goes through one atomic script that first checks the task is not
terminal, so a task is settled exactly once whichever side races to settle it; a worker's
settle is fenced by its lease. :meth:`SettlingRecords.finish` appends a run's last
events, prunes its thread and settles in one round trip. :class:`SettlingRecords` is part
of :class:`~wire.store.RecordStore`, on the same client and keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from . import scripts
from .codec import dumps
from .keys import Keys
from .store_results import CancelResult, Settlement, SettleResult, reply_text


class SettlingRecords:
    """The settling scripts (see the module docstring)."""

    redis: Redis
    keys: Keys
    retention_seconds: int
    _append: AsyncScript
    """The append script (``RecordStore``'s): ``finish`` sends the last events with it."""

    def __init__(self, redis: Redis) -> None:
        self._settle: AsyncScript = redis.register_script(scripts.SETTLE)
        self._cancel: AsyncScript = redis.register_script(scripts.CANCEL)
        self._release: AsyncScript = redis.register_script(scripts.RELEASE)
        self._hand_back: AsyncScript = redis.register_script(scripts.HAND_BACK)

    def _settling_keys(self, session_id: str, task_id: str) -> list[str]:
        """KEYS of the scripts that may settle a task (``settle.lua``, ``cancel.lua``)."""
        return [
            self.keys.task(task_id),
            self.keys.session(session_id),
            self.keys.events(task_id),
            self.keys.lease(session_id),
            self.keys.running(),
            self.keys.starting(),
        ]

    def _settle_call(
        self,
        session_id: str,
        task_id: str,
        state: str,
        outcome: dict[str, Any],
        lease: str,
        run_ended: bool,
    ) -> tuple[list[str], list[Any]]:
        keys = self._settling_keys(session_id, task_id)
        args: list[Any] = [
            lease,
            state,
            dumps(outcome),
            "1" if run_ended else "0",
            task_id,
            self.retention_seconds,
        ]
        return keys, args

    @staticmethod
    def _settlement(reply: Any) -> Settlement:
        values = [reply_text(item) for item in reply]
        result = SettleResult(values[0])
        if len(values) < 3:
            return Settlement(result)
        return Settlement(result, values[1], values[2] == "1", values[3] if len(values) > 3 else "")

    async def settle(
        self,
        session_id: str,
        task_id: str,
        state: str,
        outcome: dict[str, Any],
        *,
        lease: str = "",
        run_ended: bool = False,
    ) -> Settlement:
        keys, args = self._settle_call(session_id, task_id, state, outcome, lease, run_ended)
        return self._settlement(await self._settle(keys=keys, args=args))

    async def finish(
        self,
        session_id: str,
        task_id: str,
        lease: str,
        events: tuple[int, Sequence[tuple[str, str, str]]] | None,
        prune: tuple[str, Sequence[str], Sequence[Any]] | None,
        state: str,
        outcome: dict[str, Any],
    ) -> tuple[int | None, Settlement]:
        """A run's last steps in one round trip: append its last batch of ``events``
        (``(batch number, entries)``, as :meth:`append`), run ``prune`` (``(script sha,
        keys, args)``, a lease-checked script), settle under ``lease`` (as :meth:`settle`
        with ``run_ended``). Each script checks the lease itself, in this order, so this is
        what the three calls one after the other do. Returns the append's result (``None``
        without events) and the settlement.

        Raises ``NoScriptError`` (a restarted Redis lost the scripts) or a connection error
        before or after any of them ran: all three are idempotent, so the caller makes the
        same calls one by one (which also loads the scripts)."""
        pipe = self.redis.pipeline(transaction=False)
        if events is not None:
            batch, entries = events
            args: list[Any] = [lease, str(batch)]
            for kind, tag, payload in entries:
                args.extend((kind, tag, payload))
            keys = [self.keys.task(task_id), self.keys.lease(session_id), self.keys.events(task_id)]
            pipe.evalsha(self._append.sha, len(keys), *keys, *args)
        if prune is not None:
            sha, prune_keys, prune_args = prune
            pipe.evalsha(sha, len(prune_keys), *prune_keys, *prune_args)
        keys, args = self._settle_call(session_id, task_id, state, outcome, lease, True)
        pipe.evalsha(self._settle.sha, len(keys), *keys, *args)
        replies = await pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, BaseException):
                raise reply
        appended = int(replies[0]) if events is not None else None
        return appended, self._settlement(replies[-1])

    async def cancel(self, session_id: str, task_id: str) -> tuple[CancelResult, str, str]:
        """Record a cancellation request; returns the result, the outcome JSON when it
        settled the task here, and the task promoted from the session's queue ('')."""
        reply = await self._cancel(
            keys=self._settling_keys(session_id, task_id),
            args=[task_id, self.keys.cancel_channel(), self.retention_seconds],
        )
        values = [reply_text(item) for item in reply]
        return (
            CancelResult(values[0]),
            values[1] if len(values) > 1 else "",
            values[2] if len(values) > 2 else "",
        )

    async def release(self, session_id: str, task_id: str, lease: str) -> str:
        """Free the session after a run that outlived its settled task ended; returns the
        task promoted from the session's queue ('' if none), for the caller to publish."""
        keys = [
            self.keys.lease(session_id),
            self.keys.session(session_id),
            self.keys.task(task_id),
            self.keys.starting(),
        ]
        reply = await self._release(keys=keys, args=[lease, task_id])
        return reply_text(reply[1])

    async def hand_back(self, session_id: str, task_id: str, lease: str) -> bool:
        """The stopping worker's run ended unsettled: requeued, not lost (see
        ``scripts.HAND_BACK``). Whether the task was handed back."""
        keys = [
            self.keys.lease(session_id),
            self.keys.session(session_id),
            self.keys.task(task_id),
            self.keys.starting(),
        ]
        return bool(await self._hand_back(keys=keys, args=[lease, task_id]))


__all__ = ["SettlingRecords"]
