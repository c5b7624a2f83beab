"""The end of a run: its last events, pruning and the settle, exactly once.

A run that reached its outcome writes its last events, prunes its thread and settles in
one round trip (``RecordStore.finish``); one step at a time when that round trip failed
(each step is idempotent) or a full pruning sweep is due. A settle retries through a Redis
outage while the lease may still be the run's, then acts on what the settle found: a
stale lease (another run settles), a task already settled elsewhere (the cleanup bound),
a queued task promoted in the same step (its run is published), a released session (its
thread is deleted).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from agent_harness_protocol import (
    Cancelled,
    Completed,
    Failed,
    TaskOutcome,
    TaskState,
    Unresolved,
)
from redis.exceptions import RedisError

from wire.backoff import CONNECTION_ERRORS, Outage
from wire.codec import RemoteCause, outcome_to_json
from wire.settings import Settings
from wire.store import RecordStore, Settlement, SettleResult

from .event_sink import EventSink, Withheld
from .pruning import CheckpointPruner

log = logging.getLogger(__name__)

Publish = Callable[[str, str], Awaitable[None]]
"""Publishes a task's run message: ``publish(task_id, session_id)``."""


class ThreadDeleter:
    """Deletes a session's checkpoint thread (the runtime's, through its saver)."""

    async def __call__(self, thread_id: str) -> None:
        raise NotImplementedError


_STATE_OF = {
    Completed: TaskState.COMPLETED,
    Failed: TaskState.FAILED,
    Cancelled: TaskState.CANCELLED,
    Unresolved: TaskState.UNRESOLVED,
}


def _encoded(outcome: TaskOutcome) -> dict[str, object]:
    cause = outcome.cause if isinstance(outcome, Failed) else None
    return outcome_to_json(outcome, RemoteCause.of(cause) if cause is not None else None)


class Settler:
    """Ends the runs of one worker process (see the module docstring)."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: RecordStore,
        delete_thread: ThreadDeleter,
        pruner: CheckpointPruner | None = None,
        publish: Publish | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._delete_thread = delete_thread
        self._pruner = pruner
        self._publish = publish

    async def finish(
        self,
        session_id: str,
        outcome: TaskOutcome,
        lease: str,
        sink: EventSink,
        withheld: Withheld | None,
    ) -> bool:
        """The run's last events, pruning and settle in one round trip (see
        ``RecordStore.finish``); one by one if that round trip failed (each step is
        idempotent) or a full pruning sweep is due. Whether the session has been released."""
        prune = None if self._pruner is None else self._pruner.chain_call(session_id, lease)
        if prune is not None or self._pruner is None:
            task_id = outcome.task_id.value
            try:
                appended, settlement = await self._store.finish(
                    session_id,
                    task_id,
                    lease,
                    None if withheld is None else (withheld.batch, withheld.entries),
                    prune,
                    _STATE_OF[type(outcome)].value,
                    _encoded(outcome),
                )
            except RedisError as error:
                log.info("task %s: finishing in one round trip failed (%s)", task_id, error)
            else:
                if appended is not None:
                    sink.record(appended)
                return await self._settled(session_id, outcome, settlement, lease, run_ended=True)
        if withheld is not None:
            await sink.send(withheld)
        await self.prune(session_id, lease)
        return await self.settle(session_id, outcome, lease, run_ended=True)

    async def settle(
        self, session_id: str, outcome: TaskOutcome, lease: str, *, run_ended: bool
    ) -> bool:
        """Settle; whether the session has been released (its thread must go)."""
        settlement = await self._settle_retrying(
            session_id, outcome, _encoded(outcome), lease=lease, run_ended=run_ended
        )
        return await self._settled(session_id, outcome, settlement, lease, run_ended=run_ended)

    async def start_promoted(self, task_id: str, session_id: str) -> None:
        """Publish the run of the task the settle promoted from the session's queue. A
        failure is logged: the sweeper publishes it after its hold-off (see promote())."""
        if not task_id or self._publish is None:
            return
        try:
            await self._publish(task_id, session_id)
        except Exception:
            log.exception("publishing queued task %s failed; the sweeper will", task_id)

    async def prune(self, session_id: str, lease: str) -> None:
        """Keep the thread to its latest checkpoints while this run still holds the lease
        (before settling frees it). A failure costs storage, never the outcome."""
        if self._pruner is None:
            return
        try:
            await self._pruner.prune(session_id, lease)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pruning the checkpoints of session %s failed", session_id)

    async def delete_released_thread(self, session_id: str) -> None:
        """The session was released while this run went on: its last writes must go too."""
        try:
            await self._delete_thread(self._store.keys.thread_id(session_id))
        except Exception:
            log.exception("deleting the checkpoint thread of released session %s", session_id)

    async def _settled(
        self,
        session_id: str,
        outcome: TaskOutcome,
        settlement: Settlement,
        lease: str,
        *,
        run_ended: bool,
    ) -> bool:
        """Act on a settle's result; whether the session has been released."""
        if settlement.result is SettleResult.STALE:
            log.warning("task %s: settle refused, the lease was taken over", outcome.task_id)
        elif settlement.result is SettleResult.TERMINAL and run_ended:
            # Settled elsewhere (cleanup bound): the run has ended now, free the session.
            promoted = await self._store.release(session_id, outcome.task_id.value, lease)
            await self.start_promoted(promoted, session_id)
        await self.start_promoted(settlement.promoted, session_id)
        return settlement.session_released

    async def _settle_retrying(
        self,
        session_id: str,
        outcome: TaskOutcome,
        encoded: dict[str, object],
        *,
        lease: str,
        run_ended: bool,
    ) -> Settlement:
        """Settle, retrying through a Redis outage while the lease may still be ours.

        Settling is idempotent: a repeat of a settle that landed (its reply lost) finds
        the task terminal and returns the stored outcome."""
        outage = Outage(
            f"task {outcome.task_id.value}: settle", window=self._settings.lease_ttl, logger=log
        )
        while True:
            try:
                return await self._store.settle(
                    session_id,
                    outcome.task_id.value,
                    _STATE_OF[type(outcome)].value,
                    encoded,
                    lease=lease,
                    run_ended=run_ended,
                )
            except CONNECTION_ERRORS as error:
                if outage.exhausted():
                    raise
                await outage.back_off(error)


__all__ = ["Publish", "Settler", "ThreadDeleter"]
