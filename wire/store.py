"""Typed async access to the records, streams and leases through the atomic scripts.

The scripts' replies are typed in ``wire.store_results`` (re-exported here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from . import scripts
from .dead_letters import DEAD_LETTERS_KEPT
from .interaction_records import InteractionRecords
from .keys import Keys
from .records import SessionField, TaskField
from .settling_records import SettlingRecords
from .statistics import TaskStatistics, parse_task_statistics
from .store_results import (
    AWAITING_RESPONSE,
    HANDED_BACK,
    BusyPolicy,
    CancelResult,
    Claim,
    ClaimResult,
    LossPolicy,
    PauseResult,
    RecoverResult,
    ReleaseResult,
    ReopenResult,
    RespondResult,
    Settlement,
    SettleResult,
    StartingFate,
    StartingRecovery,
    StartResult,
    UnpublishedStarts,
    claim_from_reply,
    reply_text,
)
from .tenants import UNKNOWN_LIMITS, TenantLimits

DEFAULT_TASK_RETENTION = timedelta(days=7)


class RecordStore(SettlingRecords, InteractionRecords):
    """One namespace's records on one Redis client (bytes or str responses both work).

    ``retention``: how long a settled task's record and event stream are kept (every
    settling script sets this TTL)."""

    def __init__(
        self, redis: Redis, keys: Keys, retention: timedelta = DEFAULT_TASK_RETENTION
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.retention_seconds = max(1, int(retention.total_seconds()))
        InteractionRecords.__init__(self, redis)
        SettlingRecords.__init__(self, redis)
        self._start: AsyncScript = redis.register_script(scripts.START_TASK)
        self._rollback: AsyncScript = redis.register_script(scripts.ROLLBACK_START)
        self._record_trace: AsyncScript = redis.register_script(scripts.RECORD_TRACE)
        self._block: AsyncScript = redis.register_script(scripts.BLOCK_UNCONFIRMED)
        self._confirm: AsyncScript = redis.register_script(scripts.CONFIRM_START)
        self._claim: AsyncScript = redis.register_script(scripts.CLAIM)
        self._append: AsyncScript = redis.register_script(scripts.APPEND)
        self._reopen: AsyncScript = redis.register_script(scripts.REOPEN)
        self._touch: AsyncScript = redis.register_script(scripts.TOUCH_HANDLES)
        self._release_session: AsyncScript = redis.register_script(scripts.RELEASE_SESSION)
        self._tool_attempt: AsyncScript = redis.register_script(scripts.TOOL_ATTEMPT)

    # -- sessions ---------------------------------------------------------------------
    async def create_session(self, session_id: str, fields: Mapping[SessionField, str]) -> None:
        mapping: dict[Any, Any] = {str(name): value for name, value in fields.items()}
        await self.redis.hset(self.keys.session(session_id), mapping=mapping)

    async def session_record(self, session_id: str) -> dict[str, str]:
        """The session's hash, by :class:`SessionField` name (empty: no such session)."""
        raw = await self.redis.hgetall(self.keys.session(session_id))
        return {reply_text(key): reply_text(value) for key, value in raw.items()}

    async def release_session(
        self, session_id: str, *, force: bool = False, unconfirmed_task: str = ""
    ) -> tuple[ReleaseResult, bool]:
        """Close a non-persistent session and forget it (delete its record, lease, fence
        and handle keys) in one step when none of its tasks is unsettled; ``force``
        forgets it whatever still runs. An unconfirmed start of it that no worker claimed
        yet is settled Cancelled on closing: it can never run (see
        ``scripts.RELEASE_SESSION``). Also returns, once forgotten, whether a run of it
        was ever claimed (``False``: its checkpoint thread holds nothing)."""
        keys = [
            self.keys.session(session_id),
            self.keys.lease(session_id),
            self.keys.fence(session_id),
            self.keys.handles(session_id),
            self.keys.running(),
            self.keys.starting(),
        ]
        if unconfirmed_task:
            keys += [self.keys.task(unconfirmed_task), self.keys.events(unconfirmed_task)]
        reply = await self._release_session(
            keys=keys,
            args=[
                self.keys.task_prefix(),
                "forget" if force else "close",
                unconfirmed_task,
                self.retention_seconds,
            ],
        )
        result = ReleaseResult(reply_text(reply[0]))
        ran = result is not ReleaseResult.FORGOTTEN or reply_text(reply[1]) != "0"
        return result, ran

    async def reopen(
        self,
        session_id: str,
        spec_json: str,
        handle_id: str,
        handle_ttl_ms: int,
        profile: tuple[str, str],
    ) -> tuple[ReopenResult, str]:
        """Open one more handle on a persistent session (see ``scripts.REOPEN``)."""
        reply = await self._reopen(
            keys=[
                self.keys.session(session_id),
                self.keys.handles(session_id),
                self.keys.lease(session_id),
                self.keys.checkpoint_latest(session_id),
            ],
            args=[self.keys.task_prefix(), spec_json, handle_id, handle_ttl_ms, *profile],
        )
        values = [reply_text(item) for item in reply]
        return ReopenResult(values[0]), values[1] if len(values) > 1 else ""

    async def touch_handles(self, session_id: str, handle_ids: Sequence[str], ttl_ms: int) -> None:
        """Register or refresh open handles of a persistent session."""
        if handle_ids:
            await self._touch(keys=[self.keys.handles(session_id)], args=[ttl_ms, *handle_ids])

    async def drop_handle(self, session_id: str, handle_id: str) -> None:
        await self.redis.zrem(self.keys.handles(session_id), handle_id)

    async def lease_holder(self, session_id: str) -> str:
        return reply_text(await self.redis.get(self.keys.lease(session_id)))

    # -- starting -----------------------------------------------------------------------
    async def start_task(
        self,
        session_id: str,
        task_id: str,
        input_json: str,
        *,
        if_busy: BusyPolicy = BusyPolicy.REJECT,
        idempotency: tuple[str, str] | None = None,
        idempotency_retention: timedelta = timedelta(hours=24),
        queue: str,
        limits: TenantLimits | None = None,
    ) -> tuple[StartResult, str]:
        """Claim the session and write the task record (see ``start_task.lua``); the task
        runs on broker ``queue``.

        ``idempotency``: the client's key and a fingerprint of its request; a key used
        before answers ``REPLAY`` (same fingerprint) or ``REUSED`` with the earlier task.
        ``limits``: the session's tenant's (``wire.tenants``); None leaves the tenant's
        recorded limits as they are and applies none."""
        key, fingerprint = idempotency if idempotency is not None else ("", "")
        reply = await self._start(
            keys=[
                self.keys.session(session_id),
                self.keys.task(task_id),
                self.keys.lease(session_id),
                self.keys.starting(),
                self.keys.session_queue(session_id),
                self.keys.idempotency(session_id, key),
                self.keys.task_statistics(),
            ],
            args=[
                task_id,
                input_json,
                self.keys.task_prefix(),
                session_id,
                if_busy.value,
                fingerprint,
                max(1, int(idempotency_retention.total_seconds())),
                queue,
                *(
                    UNKNOWN_LIMITS
                    if limits is None
                    else limits.script_args(timedelta(seconds=self.retention_seconds))
                ),
            ],
        )
        values = [reply_text(item) for item in reply]
        return StartResult(values[0]), values[1] if len(values) > 1 else ""

    async def tool_attempt(
        self, session_id: str, task_id: str, tool_call_id: str, lease: str
    ) -> int:
        """Count one more attempt of the tool call under ``lease``; its number (1 for the
        first), or 0 when the lease is no longer the run's (see ``tool_attempt.lua``)."""
        reply = await self._tool_attempt(
            keys=[self.keys.lease(session_id), self.keys.tool_attempts(task_id)],
            args=[lease, tool_call_id, self.retention_seconds],
        )
        return int(reply)

    async def unadopt(self, task_id: str) -> None:
        """A retry that adopted an unpublished start could not publish it (surely not
        delivered): the next retry may adopt it."""
        await self.redis.hdel(self.keys.task(task_id), TaskField.ADOPTED)

    async def task_queue(self, task_id: str) -> str | None:
        """The broker queue the task was started on (None: not recorded)."""
        return reply_text(await self.redis.hget(self.keys.task(task_id), TaskField.QUEUE)) or None

    async def task_route(self, task_id: str) -> tuple[str | None, str | None]:
        """The broker queue the task was started on and its trace context (the record's
        ``trace`` JSON), in one read; ``None`` for what is not recorded."""
        queue, trace = await self.redis.hmget(
            self.keys.task(task_id), [TaskField.QUEUE, TaskField.TRACE]
        )
        return reply_text(queue) or None, reply_text(trace) or None

    async def record_trace(self, task_id: str, trace: str) -> bool:
        """Keep a just-started task's trace context in its record (``record_trace.lua``);
        ``False`` when the record is gone."""
        return bool(await self._record_trace(keys=[self.keys.task(task_id)], args=[trace]))

    async def rollback_start(self, session_id: str, task_id: str) -> bool:
        keys = [self.keys.session(session_id), self.keys.task(task_id), self.keys.starting()]
        return bool(await self._rollback(keys=keys, args=[task_id]))

    @property
    def confirm_start_sha(self) -> str:
        """SHA1 of the confirm script: a caller pipelines ``EVALSHA sha 1 <task key>``
        with its first stream read, so confirming costs no round trip of its own."""
        return str(self._confirm.sha)

    async def confirm_start(self, task_id: str) -> None:
        """The publish of the task's run message returned OK (see ``confirm_start.lua``)."""
        await self._confirm(keys=[self.keys.task(task_id)])

    async def block_unconfirmed(self, session_id: str, task_id: str) -> None:
        """Block the session behind the start of ``task_id`` whose delivery is unknown."""
        keys = [self.keys.session(session_id), self.keys.task(task_id)]
        await self._block(keys=keys, args=[task_id])

    async def task_statistics(self) -> TaskStatistics:
        """The deployment's task counters and histograms (see ``wire.statistics``)."""
        raw = await self.redis.hgetall(self.keys.task_statistics())
        return parse_task_statistics({reply_text(k): reply_text(v) for k, v in raw.items()})

    async def active_counts(self) -> tuple[int, int]:
        """Tasks started and not yet claimed, and claimed and not yet settled, now."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(self.keys.starting())
        pipe.zcard(self.keys.running())
        starting, running = await pipe.execute()
        return int(starting), int(running)

    # -- worker side --------------------------------------------------------------------
    async def cancel_recorded(self, task_id: str) -> bool:
        """Whether the task's cancellation has been requested (its durable flag)."""
        return reply_text(await self.redis.hget(self.keys.task(task_id), TaskField.CANCEL)) == "1"

    async def task_record(self, task_id: str) -> dict[str, str]:
        """The task's hash, by :class:`TaskField` name (empty: no such task)."""
        raw = await self.redis.hgetall(self.keys.task(task_id))
        return {reply_text(key): reply_text(value) for key, value in raw.items()}

    async def claim(
        self, session_id: str, task_id: str, token: str, lease_ms: int, policy: LossPolicy
    ) -> Claim:
        """Claim the task and the session lease; returns both records on success."""
        keys, args = self.claim_call(session_id, task_id, token, lease_ms, policy)
        return claim_from_reply(await self._claim(keys=keys, args=args))

    def claim_call(
        self, session_id: str, task_id: str, token: str, lease_ms: int, policy: LossPolicy
    ) -> tuple[list[str], list[str | int]]:
        """The claim script's KEYS and ARGV (``scripts.CLAIM``), for a client of any kind
        (a worker claims from the pool thread holding the delivery, synchronously)."""
        keys = [
            self.keys.task(task_id),
            self.keys.lease(session_id),
            self.keys.fence(session_id),
            self.keys.events(task_id),
            self.keys.session(session_id),
            self.keys.running(),
            self.keys.starting(),
            self.keys.claim_counts(),
            self.keys.dead_letters(),
            self.keys.dead_letter_counts(),
        ]
        args: list[str | int] = [
            token,
            lease_ms,
            session_id,
            task_id,
            "resume" if policy.resume else "unresolved",
            policy.max_deliveries,
            policy.lost_outcome,
            policy.exhausted_outcome,
            self.retention_seconds,
            DEAD_LETTERS_KEPT,
        ]
        return keys, args

    async def count_missing(self) -> None:
        """Count a message dropped before any claim because it names no session and its
        task has no record (the claim's ``missing``, found by the lookup instead)."""
        await self.redis.hincrby(self.keys.claim_counts(), ClaimResult.MISSING.value, 1)

    async def claim_counts(self) -> Mapping[ClaimResult, int]:
        """How many run messages the claim ended with each result since the deployment
        began (every result present, 0 if never seen). A field this version does not know
        (written by a newer worker) is left out."""
        raw = await self.redis.hgetall(self.keys.claim_counts())
        known = {result.value: result for result in ClaimResult}
        counts = dict.fromkeys(ClaimResult, 0)
        for name, value in raw.items():
            result = known.get(reply_text(name))
            if result is not None:
                counts[result] = int(reply_text(value))
        return counts

    async def append(
        self,
        session_id: str,
        task_id: str,
        lease: str,
        entries: Sequence[tuple[str, str, str]],
        batch: int,
    ) -> int:
        """Append under the lease. ``batch`` numbers a run's batches (1, 2, ...): resending
        a batch after its reply was lost cannot append it twice."""
        keys, args = self.append_call(session_id, task_id, lease, entries, batch)
        return int(await self._append(keys=keys, args=args))

    def append_call(
        self,
        session_id: str,
        task_id: str,
        lease: str,
        entries: Sequence[tuple[str, str, str]],
        batch: int,
    ) -> tuple[list[str], list[str]]:
        """The append script's KEYS and ARGV (``scripts.APPEND``), to pipeline many."""
        args: list[str] = [lease, str(batch)]
        for kind, tag, payload in entries:
            args.extend((kind, tag, payload))
        keys = [self.keys.task(task_id), self.keys.lease(session_id), self.keys.events(task_id)]
        return keys, args

    @property
    def append_sha(self) -> str:
        """The append script's SHA1 (``EVALSHA``)."""
        return str(self._append.sha)

    # -- interactions -----------------------------------------------------------------


__all__ = [
    "AWAITING_RESPONSE",
    "DEFAULT_TASK_RETENTION",
    "HANDED_BACK",
    "BusyPolicy",
    "CancelResult",
    "Claim",
    "ClaimResult",
    "LossPolicy",
    "PauseResult",
    "RecordStore",
    "RecoverResult",
    "ReleaseResult",
    "ReopenResult",
    "RespondResult",
    "SettleResult",
    "Settlement",
    "StartResult",
    "StartingFate",
    "StartingRecovery",
    "UnpublishedStarts",
    "claim_from_reply",
]
