"""Claim a delivered run from the pool thread that holds its delivery, never on the loop.

The claim script takes the session's lease for one TTL from when it runs. The lease
counts as this run's only once its reply has been read, and must reach the process's
renewer (``workers.lease_renewer``) well within that TTL. Read on a busy event loop, a
claim's reply can wait behind every run's work; read here, in the pool thread that is
parked on the delivery anyway, with a synchronous client of its own, the lease reaches
the renewer a round trip after the claim was sent, whatever the loop is busy with.
The run then goes on on the loop (``TaskRunner.run_claimed``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from agent_harness_protocol import TaskId
from redis import BlockingConnectionPool, Redis

from wire import scripts
from wire.keys import is_valid_id
from wire.records import TaskField
from wire.redis_options import pool_options
from wire.settings import Settings
from wire.store import Claim, ClaimResult, RecordStore, claim_from_reply

from .admission import STARTS_AT_ONCE
from .lease import SessionLease
from .lease_renewer import LeaseRenewer
from .loss import loss_policy

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClaimedRun:
    """A delivery whose claim succeeded: the claim's records and the run's lease, which
    the renewer renews from now on."""

    task_id: str
    claim: Claim
    lease: SessionLease


class DeliveryClaimer:
    """Thread-safe; one per worker process."""

    def __init__(
        self,
        settings: Settings,
        store: RecordStore,
        token: str,
        renewer: LeaseRenewer,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._settings = settings
        self._store = store
        self._token = token
        self._renewer = renewer
        self._loop = loop
        self._lease_ms = int(settings.lease_ttl.total_seconds() * 1000)
        pool = BlockingConnectionPool.from_url(
            settings.redis_url,
            max_connections=STARTS_AT_ONCE + 2,
            timeout=30,
            decode_responses=True,
            **pool_options(),
        )
        self._client = Redis(connection_pool=pool)
        self._claim = self._client.register_script(scripts.CLAIM)

    def close(self) -> None:
        self._client.close()
        self._client.connection_pool.disconnect()

    def claim(self, task_id: str, session_id: str | None) -> ClaimedRun | None:
        """Claim the delivered run (blocking, in a pool thread); ``None`` when there is
        nothing to run (invalid ids, no record, settled, busy...: logged and counted as
        the claim script counts them). Redis errors propagate: the delivery is handed
        back (``workers.celery_app``)."""
        if not is_valid_id(task_id) or (session_id is not None and not is_valid_id(session_id)):
            log.error("refusing a message with invalid ids %r / %r", task_id, session_id)
            return None
        if session_id is None:
            found = self._client.hget(self._store.keys.task(task_id), TaskField.SESSION)
            session_id = str(found or "")
            if not session_id:
                log.warning("task %s has no record; message dropped", task_id)
                self._client.hincrby(self._store.keys.claim_counts(), ClaimResult.MISSING, 1)
                return None
        policy = loss_policy(self._settings, TaskId(task_id))
        keys, args = self._store.claim_call(
            session_id, task_id, self._token, self._lease_ms, policy
        )
        # The lease lives at least one TTL from when its claim was sent.
        acquired_at = time.monotonic()
        claim = claim_from_reply(self._claim(keys=keys, args=args))
        if claim.result is not ClaimResult.CLAIMED:
            log.info("task %s not run: %s", task_id, claim.result.value)
            return None
        lease = SessionLease(
            self._store,
            session_id,
            task_id,
            claim.lease,
            self._settings.lease_ttl,
            acquired_at=acquired_at,
            renewer=self._renewer,
            loop=self._loop,
        )
        lease.start()
        return ClaimedRun(task_id, claim, lease)


__all__ = ["ClaimedRun", "DeliveryClaimer"]
