"""The process's lease renewer, against a real Redis: one round trip for many leases,
renewals that no busy loop delays, and every lease still lost before it can lapse.

Leases are set in Redis as a claim sets them (``"<fence>:<token>"`` with a TTL), then
handed to a :class:`LeaseRenewer`; what each test observes is Redis (the key's TTL and
value) and the lease's own ``lost`` and ``cancel_requested`` events on its loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import uuid4

import pytest
from redis.asyncio import Redis as AsyncRedis

from wire.keys import Keys
from wire.settings import Settings
from wire.store import RecordStore
from workers.admission import RunAdmission
from workers.errors import StaleLeaseError
from workers.lease import SessionLease
from workers.lease_renewer import LeaseRenewer
from workers.live_run import LiveRun
from workers.loop_lag import LoopLag
from workers.model_calls import ModelCalls
from workers.supervision import TurnSupervisor

from .support.tcp_proxy import proxy_to

TTL = timedelta(seconds=1.2)
"""Renewed every 0.2 s, lost 0.6 s after the last renewal that succeeded."""


@pytest.fixture
async def store(settings: Settings) -> AsyncIterator[RecordStore]:
    """A namespace of its own, deleted afterwards: no key of these tests may expire
    later, during another test's comparison of the keyspace."""
    client = AsyncRedis.from_url(settings.redis_url, decode_responses=True)
    namespace = f"{settings.namespace}-renew-{uuid4().hex[:6]}"
    yield RecordStore(client, Keys(namespace))
    keys = [key async for key in client.scan_iter(match=f"{namespace}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


async def _claimed(
    store: RecordStore, renewer: LeaseRenewer | None, *, claimed_ago: float = 0.0
) -> SessionLease:
    """A lease set in Redis with a full TTL, as if claimed ``claimed_ago`` seconds ago."""
    session, task = uuid4().hex, uuid4().hex
    value = f"1:{uuid4().hex}"
    ttl_ms = int((TTL.total_seconds() - claimed_ago) * 1000)
    await store.redis.set(store.keys.lease(session), value, px=ttl_ms)
    await store.redis.hset(store.keys.task(task), "state", "running")
    return SessionLease(
        store,
        session,
        task,
        value,
        TTL,
        acquired_at=time.monotonic() - claimed_ago,
        renewer=renewer,
    )


async def _ttl_ms(store: RecordStore, lease: SessionLease) -> int:
    return int(await store.redis.pttl(lease.key))


async def test_many_leases_are_renewed_in_few_round_trips(
    settings: Settings, store: RecordStore
) -> None:
    renewer = LeaseRenewer(settings.redis_url, store.keys, TTL)
    renewer.start()
    try:
        leases = [await _claimed(store, renewer) for _ in range(300)]
        for lease in leases:
            lease.start()
        await asyncio.sleep(3 * TTL.total_seconds())  # each would have lapsed twice
        assert not any(lease.lost.is_set() for lease in leases)
        assert all([await _ttl_ms(store, lease) > 0 for lease in leases])
        # Renewed every 0.1-0.2 s for 3.6 s: ~20-40 renewals of each lease, in about
        # as many round trips for all 300, not 300 times as many.
        assert 10 <= renewer.round_trips <= 80
    finally:
        renewer.stop()


async def test_a_loop_blocked_past_the_deadline_keeps_its_leases(
    settings: Settings, store: RecordStore
) -> None:
    """The renewals run in their own thread: a loop that does not turn for twice the
    renewal deadline (a CPU-bound step, a stall) finds its leases renewed, not lost."""
    renewer = LeaseRenewer(settings.redis_url, store.keys, TTL)
    renewer.start()
    try:
        lease = await _claimed(store, renewer)
        lease.start()
        time.sleep(2 * TTL.total_seconds() / 2)  # noqa: ASYNC251 (this loop does not turn)
        assert lease.locally_valid()
        await asyncio.sleep(0.05)
        assert not lease.lost.is_set()
        assert await _ttl_ms(store, lease) > 0
    finally:
        renewer.stop()


async def test_a_lease_taken_over_or_cancelled_is_told_to_its_run(
    settings: Settings, store: RecordStore
) -> None:
    renewer = LeaseRenewer(settings.redis_url, store.keys, TTL)
    renewer.start()
    try:
        taken, cancelled = await _claimed(store, renewer), await _claimed(store, renewer)
        taken.start()
        cancelled.start()
        await store.redis.set(taken.key, "2:another-worker", px=5000)
        await store.redis.hset(store.keys.task(cancelled.task_id), "cancel", "1")
        await asyncio.wait_for(taken.lost.wait(), 2)
        await asyncio.wait_for(cancelled.cancel_requested.wait(), 2)
        assert not cancelled.lost.is_set()
        assert await store.redis.get(taken.key) == "2:another-worker"  # never extended
    finally:
        renewer.stop()


async def test_a_lease_whose_claim_was_read_late_is_judged_by_its_ttl(
    settings: Settings, store: RecordStore
) -> None:
    """Registered past its renewal deadline but within its TTL (the claim's reply read
    late), a lease is renewed at once and its run may go on; one registered past its TTL
    is lost without a renewal that could extend another run's lease."""
    renewer = LeaseRenewer(settings.redis_url, store.keys, TTL)
    renewer.start()
    try:
        late = await _claimed(store, renewer, claimed_ago=0.9)  # deadline was at 0.6 s
        assert not late.confirmed
        late.start()
        assert await asyncio.wait_for(late.ready(), 2)
        assert late.confirmed
        assert await _ttl_ms(store, late) > 900
        gone = await _claimed(store, renewer, claimed_ago=1.19)
        await asyncio.sleep(0.05)  # its TTL has lapsed in Redis
        gone.start()
        assert not await asyncio.wait_for(gone.ready(), 2)
        assert gone.lost.is_set()
    finally:
        renewer.stop()


async def test_a_partition_loses_the_lease_before_it_can_lapse(
    settings: Settings, store: RecordStore
) -> None:
    with proxy_to(settings.redis_url) as proxy:
        renewer = LeaseRenewer(proxy.url, store.keys, TTL)
        renewer.start()
        try:
            lease = await _claimed(store, renewer)
            lease.start()
            await asyncio.sleep(0.5)
            assert not lease.lost.is_set()
            proxy.cut()
            cut_at = time.monotonic()
            await asyncio.wait_for(lease.lost.wait(), 3)
            lost_after = time.monotonic() - cut_at
            # Lost here while Redis still holds it: nobody else can have it yet.
            assert await _ttl_ms(store, lease) > 0
            assert lost_after < TTL.total_seconds()
        finally:
            proxy.heal()
            renewer.stop()


async def test_admission_waits_while_the_loop_lags(settings: Settings) -> None:
    """A pool thread asking to start a run waits while the loop is blocked, and is let
    through once it turns again."""
    loop = asyncio.get_running_loop()
    lag = LoopLag(loop, every=0.02, window=0.2)
    lag.start()
    admission = RunAdmission(lag, 0.1, starts_at_once=2)
    stopping = threading.Event()
    admitted: list[float] = []
    try:
        await asyncio.sleep(0.3)
        assert lag.current() < 0.1

        def ask() -> None:
            ticket = admission.admit(stopping)
            assert ticket is not None
            admitted.append(time.monotonic())
            ticket.started()

        # This loop does not turn while it sleeps: the probe waits, the lag grows.
        blocked_at = time.monotonic()
        time.sleep(0.2)  # noqa: ASYNC251
        thread = threading.Thread(target=ask)
        thread.start()
        time.sleep(0.5)  # noqa: ASYNC251
        assert not admitted
        assert lag.current() >= 0.4
        released_at = time.monotonic()
        await asyncio.to_thread(thread.join, 5)
        assert admitted
        assert admitted[0] >= released_at > blocked_at
    finally:
        stopping.set()
        lag.stop()


async def test_start_slots_bound_the_runs_starting_at_once(settings: Settings) -> None:
    lag = LoopLag(asyncio.get_running_loop(), every=0.02)
    lag.start()
    admission = RunAdmission(lag, 10.0, starts_at_once=2)
    stopping = threading.Event()
    try:
        first, second = admission.admit(stopping), admission.admit(stopping)
        assert first is not None
        assert second is not None
        waiting: list[object] = []
        thread = threading.Thread(target=lambda: waiting.append(admission.admit(stopping)))
        thread.start()
        await asyncio.sleep(0.3)
        assert not waiting  # both slots are taken
        first.started()
        first.started()  # idempotent: one slot back, not two
        await asyncio.to_thread(thread.join, 5)
        assert waiting
        assert waiting[0] is not None
        stopping.set()
        assert admission.admit(stopping) is None
    finally:
        stopping.set()
        lag.stop()


async def test_a_run_stalled_past_its_deadline_starts_no_model_call_before_the_renewer_runs(
    settings: Settings, store: RecordStore
) -> None:
    """A worker resumed from a stall (SIGSTOP, a VM pause) longer than the renewal deadline:
    its loop may reach the step before a model call before the renewer thread has judged
    the lease. The gate reads the deadline from the clock and refuses (seen in the soak
    with tools: a stalled run's model call started after SIGCONT, beside its successor's)."""
    lease = await _claimed(store, None, claimed_ago=TTL.total_seconds() / 2 + 0.1)
    assert not lease.lost.is_set()  # no renewer has said anything
    live = LiveRun(lease.task_id, lease_lost=lease.lost)
    supervisor = TurnSupervisor(ModelCalls(), store, settings.cleanup_per_task)
    with pytest.raises(StaleLeaseError):
        await supervisor.cancel_gate(live, lease)  # the step boundary before every model call
