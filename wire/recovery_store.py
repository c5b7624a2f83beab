"""The sweepers' side of the records: lapsed runs, unclaimed starts, released sessions.

Every worker's sweeper (``workers.sweeper``) finds through these scripts the runs whose
lease lapsed (to resume or settle them), the starts no worker claimed (to publish again,
or to settle as never published after the bound), and the starts of sessions released
meanwhile (to settle, never run). Each is one atomic script; the records are the
:class:`~wire.store.RecordStore`'s.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from . import scripts
from .keys import Keys
from .store import RecordStore
from .store_results import (
    LossPolicy,
    RecoverResult,
    StartingFate,
    StartingRecovery,
    UnpublishedStarts,
    reply_text,
)


class RecoveryStore:
    """The recovery scripts, on the records of ``store``."""

    def __init__(self, store: RecordStore) -> None:
        redis: Redis = store.redis
        self._redis = redis
        self._keys: Keys = store.keys
        self._retention_seconds = store.retention_seconds
        self._recover: AsyncScript = redis.register_script(scripts.RECOVER)
        self._lapsed: AsyncScript = redis.register_script(scripts.LAPSED)
        self._recover_starting: AsyncScript = redis.register_script(scripts.RECOVER_STARTING)
        self._prune_starting: AsyncScript = redis.register_script(scripts.PRUNE_STARTING)
        self._dispatch_tenants: AsyncScript = redis.register_script(scripts.DISPATCH_TENANTS)

    async def dispatch_tenants(self) -> int:
        """Admit the parked tasks their tenants have room for (``dispatch_tenants.lua``),
        after dropping admitted tasks that settled unseen; how many were admitted (their
        runs are published by the workers' dispatchers)."""
        return int(
            await self._dispatch_tenants(
                keys=[self._keys.starting(), self._keys.tenants_parked()],
                args=[self._keys.task_prefix()],
            )
        )

    async def lapsed_tasks(self) -> list[tuple[str, str]]:
        """``(task id, session id)`` of running tasks whose lease lapsed and whose
        republish hold-off passed: candidates for :meth:`recover`, in one round trip."""
        session_prefix = self._keys.session("")
        lease_suffix = self._keys.lease("").removeprefix(session_prefix)
        reply = await self._lapsed(
            keys=[self._keys.running()],
            args=[self._keys.task_prefix(), session_prefix, lease_suffix],
        )
        items = [reply_text(item) for item in reply]
        return list(zip(items[0::2], items[1::2], strict=True))

    async def recover_starting(
        self,
        queue: str,
        unclaimed_ms: int,
        holdoff_ms: int,
        unpublished: UnpublishedStarts,
        max_search: int = 10_000,
    ) -> list[StartingRecovery]:
        """Judge the unclaimed starts of ``queue`` (see ``scripts.RECOVER_STARTING``):
        which to publish again, which it settled as never published, and which tasks
        those settles promoted (to publish)."""
        reply = await self._recover_starting(
            keys=[
                self._keys.starting(),
                self._keys.broker_unacked(),
                *self._keys.broker_queue_lists(queue),
            ],
            args=[
                self._keys.task_prefix(),
                unclaimed_ms,
                holdoff_ms,
                max_search,
                queue,
                unpublished.after_ms,
                unpublished.outcome,
                self._keys.session(""),
                self._keys.events(""),
                self._keys.lease(""),
                self._keys.running(),
                self._retention_seconds,
            ],
        )
        items = [reply_text(item) for item in reply]
        return [
            StartingRecovery(StartingFate(what), task_id, session_id)
            for what, task_id, session_id in zip(items[0::3], items[1::3], items[2::3], strict=True)
        ]

    async def starts_of_released_sessions(
        self, older_than_ms: int, max_entries: int = 1000
    ) -> list[tuple[str, str]]:
        """Prune the starting set of settled or vanished tasks; return ``(task id,
        session id)`` of starts whose session was released (to be settled, never run)."""
        reply = await self._prune_starting(
            keys=[self._keys.starting()],
            args=[self._keys.task_prefix(), self._keys.session(""), older_than_ms, max_entries],
        )
        items = [reply_text(item) for item in reply]
        return list(zip(items[0::2], items[1::2], strict=True))

    async def recover(
        self, session_id: str, task_id: str, policy: LossPolicy, holdoff_ms: int
    ) -> RecoverResult:
        """Sweep one claimed task: is its run alive, or must it be resumed or settled?"""
        reply = await self._recover(
            keys=[
                self._keys.task(task_id),
                self._keys.lease(session_id),
                self._keys.session(session_id),
                self._keys.events(task_id),
                self._keys.running(),
                self._keys.starting(),
            ],
            args=[
                task_id,
                "resume" if policy.resume else "unresolved",
                policy.lost_outcome,
                holdoff_ms,
                self._retention_seconds,
            ],
        )
        return RecoverResult(reply_text(reply[0]))


__all__ = ["RecoveryStore"]
