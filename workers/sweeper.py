"""Find tasks whose worker was lost, and resume or settle them within seconds.

A run renews its session lease every sixth of ``lease_ttl``. When its worker dies
(SIGKILL, OOM, a lost machine) the lease lapses, but the broker would only redeliver the
unacknowledged message after the visibility timeout (hours). Every worker therefore sweeps
the running set every ``sweep_interval``: a claimed task whose lease lapsed is published
again (the next claim resumes it from the last checkpoint under a higher fence, or fails it
once ``max_deliveries`` is reached) or settled ``Unresolved(OBSERVATION_LOST)``, as the
deployment declares. The decision is one atomic script, so many sweeping workers publish a
lost task at most once per ``lease_ttl``; a duplicate message is harmless anyway, because
the claim admits one run per session.

Each sweep also keeps the starting set to unsettled starts of live sessions, whichever
Redis the broker is: entries of settled or vanished tasks are dropped, and a start of a
released session is settled ``Cancelled`` (no claim can ever run it).

A task still ``starting`` long after its start is published again only when its message
provably reached the broker (its publish was confirmed, or the message is in a queue list
or kombu's unacked hash): a start the caller was told is unconfirmed, whose message is
nowhere, may never have been sent and is never run by a sweep. A start never published
at all (its caller stopped between recording it and publishing it, and no idempotent
retry published it) is settled ``Failed`` after ``unpublished_start_timeout``: it never
ran, and its session is free again.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence

from agent_harness_protocol import Failed, FailureKind, TaskId
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wire.codec import dumps, outcome_to_json
from wire.recovery_store import RecoveryStore
from wire.settings import Settings
from wire.store import (
    CancelResult,
    RecordStore,
    RecoverResult,
    StartingFate,
    UnpublishedStarts,
)

from .loss import loss_policy

log = logging.getLogger(__name__)

Republish = Callable[[str, str], Awaitable[None]]
"""Publishes a run message again: ``republish(task_id, session_id)``."""


class LeaseSweeper:
    """``queues``: the broker queues this worker serves (default: ``AHP_QUEUE``). Lapsed
    leases are recovered whatever the task's queue (``republish`` publishes on the queue
    the task's record names); unclaimed starts are judged only for these queues, since
    only their lists and unacknowledged messages tell a lost start from a waiting one."""

    def __init__(
        self,
        settings: Settings,
        store: RecordStore,
        republish: Republish,
        queues: Sequence[str] = (),
    ) -> None:
        self._settings = settings
        self.queues: tuple[str, ...] = tuple(queues) or (settings.queue,)
        self._store = store
        self._recovery = RecoveryStore(store)
        self._republish = republish
        lease_ms = int(settings.lease_ttl.total_seconds() * 1000)
        # A republished message normally runs first (it has the higher priority); if it
        # has not been claimed after three lease times it is published once more.
        self._holdoff_ms = 3 * lease_ms
        self._unclaimed_ms = lease_ms
        # The queue lists must be in the records' Redis to be searched atomically.
        self._search_queue = settings.effective_broker_url == settings.redis_url
        never_published = Failed(
            TaskId("-"),
            FailureKind.TRANSPORT,
            "the task never ran: its run message never reached the broker (the process "
            "that started it stopped before publishing it)",
        )
        self._unpublished = UnpublishedStarts(
            after_ms=int(settings.unpublished_start_timeout.total_seconds() * 1000),
            outcome=dumps(outcome_to_json(never_published)),
        )

    async def serve(self) -> None:
        """Sweep until cancelled; a failed sweep is logged and retried next interval."""
        interval = self._settings.sweep_interval.total_seconds()
        while True:
            # Jitter spreads the sweeps of many workers over the interval.
            await asyncio.sleep(interval * random.uniform(0.5, 1.5))
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except (RedisConnectionError, RedisTimeoutError) as error:
                log.warning("lease sweep skipped, Redis unreachable: %s", error)
            except Exception:
                log.exception("lease sweep failed; retrying")

    async def sweep(self) -> list[str]:
        """One pass; returns the ids of the tasks it published again or settled.

        In the steady state (no lost run) a pass is three script calls, and one more per
        served queue when the broker is the records' Redis."""
        recovered: list[str] = []
        for task_id, session_id in await self._recovery.lapsed_tasks():
            policy = loss_policy(self._settings, TaskId(task_id))
            result = await self._recovery.recover(session_id, task_id, policy, self._holdoff_ms)
            if result is RecoverResult.LOST:
                log.warning("task %s lost its worker; settled unresolved", task_id)
                recovered.append(task_id)
            elif result is RecoverResult.REPUBLISH:
                log.warning("task %s lost its worker; publishing it again", task_id)
                if await self._publish_again(task_id, session_id):
                    recovered.append(task_id)
        # Whichever Redis the broker is, the starting set keeps only unsettled starts of
        # live sessions; a start of a released session is settled Cancelled (no claim can
        # ever run it: its session record is gone).
        for task_id, session_id in await self._recovery.starts_of_released_sessions(
            self._unclaimed_ms
        ):
            cancelled, _, _ = await self._store.cancel(session_id, task_id)
            if cancelled is CancelResult.SETTLED:
                log.warning("task %s started on a released session; settled cancelled", task_id)
                recovered.append(task_id)
        # Tenants' lines: parked tasks a settle did not admit (a limit raised, a settle
        # that ended a task unseen) are admitted now; the dispatchers publish them.
        if await self._recovery.dispatch_tenants():
            log.info("admitted parked tasks their tenants had room for")
        for queue in self.queues if self._search_queue else ():
            for found in await self._recovery.recover_starting(
                queue, self._unclaimed_ms, self._holdoff_ms, self._unpublished
            ):
                task_id, session_id = found.task_id, found.session_id
                if found.fate is StartingFate.SETTLED:
                    log.warning("task %s was never published; settled failed", task_id)
                    recovered.append(task_id)
                elif found.fate is StartingFate.PROMOTED:
                    await self._publish_again(task_id, session_id)
                else:
                    log.warning("task %s was taken but never claimed; publishing it again", task_id)
                    if await self._publish_again(task_id, session_id):
                        recovered.append(task_id)
        return recovered

    async def _publish_again(self, task_id: str, session_id: str) -> bool:
        try:
            await self._republish(task_id, session_id)
        except Exception:
            # The hold-off lapses and a later sweep publishes it again.
            log.exception("publishing task %s again failed", task_id)
            return False
        return True


__all__ = ["LeaseSweeper", "Republish"]
