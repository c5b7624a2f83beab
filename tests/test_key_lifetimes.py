"""Every key has an owner and a lifetime (design invariant 10).

A released session leaves nothing behind but the task records and streams the retention
setting keeps (each with a TTL); every key a full lifecycle writes has a TTL or an owner
that deletes it; a maintenance request taken by a worker that dies is carried out by
another worker; a persistent session keeps a bounded number of checkpoints and its next
task still sees the whole history. Observations come from Redis itself (key listings,
TTLs) and from the model boundary, never from the harness's own state.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from datetime import timedelta
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import (
    AgentTask,
    ApprovalDecision,
    ApprovalResponse,
    Cancelled,
    Completed,
    PersistenceRequirement,
    SessionRequirements,
    SessionSpec,
    TaskRequest,
    TaskStartUnconfirmedError,
    TextInput,
)

from harness import CeleryHarness
from harness.errors import CheckpointCleanupError
from tooling.worker_process import WorkerProcess
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings
from wire.store import ClaimResult
from workers.pruning import FULL_SWEEP_EVERY

from .support.boundary import ModelBoundary
from .support.claims import ClaimCounts
from .support.keyspace import namespace_keys
from .support.start_control import StartBoundary
from .support.waiting import wait_for

PERSISTENT = SessionSpec(requirements=SessionRequirements(persistence=PersistenceRequirement()))
_TEST_PREFIX = "ahp-test:"


def _request(text: str) -> TaskRequest:
    return TaskRequest(TextInput(text))


def _keys_naming(client: redis.Redis, ident: str) -> set[str]:
    """Every key of the whole Redis whose name contains ``ident`` (the test boundary's own
    bookkeeping keys excepted)."""
    return {
        str(key)
        for key in client.scan_iter(match=f"*{ident}*", count=1000)
        if not str(key).startswith(_TEST_PREFIX)
    }


def _retention_seconds(settings: Settings) -> float:
    return settings.task_retention.total_seconds()


def _assert_kept_only_for_retention(
    client: redis.Redis, settings: Settings, keys: Iterable[str]
) -> None:
    for key in keys:
        ttl = client.ttl(key)
        assert isinstance(ttl, int)
        assert 0 < ttl <= _retention_seconds(settings), f"{key} kept with TTL {ttl}"


def _assert_not_in_shared_sets(
    client: redis.Redis, settings: Settings, task_ids: Iterable[str]
) -> None:
    keys = Keys(settings.namespace)
    for shared in (keys.running(), keys.starting()):
        for task_id in task_ids:
            assert client.zscore(shared, task_id) is None, f"{task_id} left in {shared}"


@pytest.fixture
async def serving(settings: Settings, boundary: ModelBoundary) -> None:
    """Proof that the test workers serve (tasks and maintenance) before a test whose
    first requests go elsewhere: a turn completes."""
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        warm = await session.start_task(_request("lifetime-warm-up"))
        assert isinstance(await warm.await_outcome(), Completed)


async def _running(boundary: ModelBoundary, task: AgentTask) -> None:
    await wait_for(lambda: boundary.calls_for(task.id.value))


async def test_a_released_session_leaves_no_key_behind(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        sid = session.id.value
        completed = await session.start_task(_request("lifetime-completed"))
        assert isinstance(await completed.await_outcome(), Completed)
        boundary.hold()
        cancelled = await session.start_task(_request("lifetime-cancelled"))
        await _running(boundary, cancelled)
        await cancelled.request_cancellation()
        assert isinstance(await cancelled.await_outcome(), Cancelled)
        running = await session.start_task(_request("lifetime-released-while-running"))
        await _running(boundary, running)
        # The session had state and checkpoints of its own before the release.
        named = _keys_naming(sync_redis, sid)
        assert any(key.startswith(f"{settings.namespace}:session:") for key in named)
        assert any(key.startswith("checkpoint") for key in _keys_naming(sync_redis, sid))
        await session.release()
        boundary.release()
        tasks = [completed, cancelled, running]
        for task in tasks:
            await task.await_outcome()
    left = _keys_naming(sync_redis, sid)
    assert left == set(), f"released session {sid} left {sorted(left)}"
    task_keys = set().union(*(_keys_naming(sync_redis, task.id.value) for task in tasks))
    keys = Keys(settings.namespace)
    allowed = {keys.task(task.id.value) for task in tasks} | {
        keys.events(task.id.value) for task in tasks
    }
    assert task_keys <= allowed, sorted(task_keys - allowed)
    _assert_kept_only_for_retention(sync_redis, settings, task_keys)
    _assert_not_in_shared_sets(sync_redis, settings, [task.id.value for task in tasks])


async def test_every_key_a_lifecycle_writes_has_a_ttl_or_an_owner_that_deletes_it(
    serving: None,
    settings: Settings,
    idle_queue_settings: Settings,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
) -> None:
    """Scan the namespace after a lifecycle with every settling path a caller can reach
    (completed, cancelled while running, cancelled while queued, released while running)
    and the release of plain and persistent sessions: each new key either expires or is
    one of the deployment's shared structures, which hold nothing of these tasks, or
    one of its counters (a few fields each, kept for its life)."""
    keys = Keys(settings.namespace)
    before = namespace_keys(sync_redis, settings.namespace)
    task_ids: list[str] = []
    async with CeleryHarness(idle_queue_settings, profile="confirmed") as idle:
        session = await idle.create_session(SessionSpec())
        queued = await session.start_task(_request("lifetime-cancelled-while-queued"))
        await queued.request_cancellation()
        assert isinstance(await queued.await_outcome(), Cancelled)
        task_ids.append(queued.id.value)
        idle_sid = session.id.value
    async with CeleryHarness(settings, profile="confirmed") as harness:
        plain = await harness.create_session(SessionSpec())
        done = await plain.start_task(_request("lifetime-plain"))
        assert isinstance(await done.await_outcome(), Completed)
        boundary.hold()
        last = await plain.start_task(_request("lifetime-plain-released-while-running"))
        await _running(boundary, last)
        await plain.release()
        boundary.release()
        persistent = await harness.create_session(PERSISTENT)
        turn = await persistent.start_task(_request("lifetime-persistent"))
        assert isinstance(await turn.await_outcome(), Completed)
        await persistent.release()
        task_ids += [done.id.value, last.id.value, turn.id.value]
        persistent_sid = persistent.id.value
    # The persistent session's record, fence and checkpoints are its retained context.
    retained = {keys.session(persistent_sid), keys.fence(persistent_sid)}
    shared = set(keys.shared()) | set(keys.statistics())
    new = namespace_keys(sync_redis, settings.namespace) - before
    for key in sorted(new - retained - shared):
        ttl = sync_redis.ttl(key)
        assert isinstance(ttl, int)
        assert ttl > 0, f"{key} has no TTL and no owner that deletes it"
    for key in (keys.task(task_id) for task_id in task_ids):
        assert key in new
    _assert_kept_only_for_retention(
        sync_redis,
        settings,
        [keys.task(task_id) for task_id in task_ids]
        + [keys.events(task_id) for task_id in task_ids],
    )
    _assert_not_in_shared_sets(sync_redis, settings, task_ids)
    assert _keys_naming(sync_redis, idle_sid) == set()
    # The queued message of the cancelled start stays in the idle broker list (kombu's).
    for listed in Keys.broker_queue_lists(idle_queue_settings.queue):
        sync_redis.delete(listed)


async def test_an_unconfirmed_start_of_a_released_session_never_runs_and_expires(
    serving: None, settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """A start whose message never reached the broker stays ``starting`` (its fate is
    unknown to the caller). Once its session is released it must never run, and its
    record must not stay forever: it is settled and expires with the retention."""
    keys = Keys(settings.namespace)
    start = StartBoundary()
    async with CeleryHarness(
        settings, profile="confirmed", publisher_factory=start.publisher
    ) as harness:
        session = await harness.create_session(SessionSpec())
        start.lose_acceptance_acknowledgement(False)
        with pytest.raises(TaskStartUnconfirmedError) as raised:
            await session.start_task(_request("lifetime-unconfirmed-start"))
        task_id = raised.value.reference.request_id
        assert sync_redis.hget(keys.task(task_id), TaskField.STATE) == "starting"
        await session.release()
    await wait_for(lambda: sync_redis.ttl(keys.task(task_id)) > 0, within=30)
    assert sync_redis.hget(keys.task(task_id), TaskField.STATE) == "cancelled"
    _assert_kept_only_for_retention(
        sync_redis, settings, [keys.task(task_id), keys.events(task_id)]
    )
    _assert_not_in_shared_sets(sync_redis, settings, [task_id])
    assert not boundary.calls_for(task_id)
    assert "lifetime-unconfirmed-start" not in boundary.observed_text_values


async def test_a_message_delivered_after_its_session_was_released_never_runs_nor_fences(
    serving: None,
    settings: Settings,
    idle_queue_settings: Settings,
    boundary: ModelBoundary,
    sync_redis: redis.Redis,
) -> None:
    """The broker holds the message of an unconfirmed start; the session is released, and
    only then a worker gets the message. It must not run, and no fence may be issued for
    the forgotten session (a counter restarting from 0 could repeat an old fence)."""
    keys = Keys(settings.namespace)
    start = StartBoundary()
    async with CeleryHarness(
        idle_queue_settings, profile="confirmed", publisher_factory=start.publisher
    ) as harness:
        session = await harness.create_session(SessionSpec())
        sid = session.id.value
        start.lose_acceptance_acknowledgement(True)
        with pytest.raises(TaskStartUnconfirmedError) as raised:
            await session.start_task(_request("lifetime-delivered-after-release"))
        task_id = raised.value.reference.request_id
        idle_list = Keys.broker_queue_lists(idle_queue_settings.queue)[1]  # START_PRIORITY
        assert sync_redis.llen(idle_list) == 1
        await session.release()
    assert _keys_naming(sync_redis, sid) == set()
    claims = ClaimCounts(sync_redis, settings.namespace)
    sync_redis.lmove(idle_list, settings.queue, "RIGHT", "LEFT")
    # The release settled the start; the claim must find it so and issue nothing.
    since = await claims.consumed(ClaimResult.TERMINAL, 1, "the message of the released start")
    assert since[ClaimResult.CLAIMED] == 0, since
    await wait_for(lambda: sync_redis.ttl(keys.task(task_id)) > 0, within=30)
    assert sync_redis.hget(keys.task(task_id), TaskField.STATE) == "cancelled"
    assert not sync_redis.exists(keys.fence(sid))
    assert _keys_naming(sync_redis, sid) == set()
    assert not boundary.calls_for(task_id)


def _maintenance_settings(settings: Settings) -> Settings:
    suffix = uuid4().hex[:6]
    return settings.model_copy(
        update={
            "namespace": f"{settings.namespace}-maint-{suffix}",
            "queue": f"{settings.queue}.maint.{suffix}",
            "lease_ttl": timedelta(seconds=2),
            "sweep_interval": timedelta(seconds=0.25),
            "cleanup_total": timedelta(seconds=1.5),
        }
    )


@pytest.mark.processes
async def test_a_maintenance_request_taken_by_a_worker_that_dies_is_carried_out_by_another(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    deployment = _maintenance_settings(settings)
    keys = Keys(deployment.namespace)
    first = WorkerProcess(deployment, concurrency=1, name="maint-first")
    second = WorkerProcess(deployment, concurrency=1, name="maint-second")
    first.start()
    try:
        async with CeleryHarness(deployment, profile="confirmed") as harness:
            session = await harness.create_session(SessionSpec())
            sid = session.id.value
            task = await session.start_task(_request("maintenance-thread"))
            assert isinstance(await task.await_outcome(), Completed)
            assert any(key.startswith("checkpoint") for key in _keys_naming(sync_redis, sid))
            assert first.pid is not None
            # The only consumer of this deployment stops while blocked waiting for a
            # request; Redis still hands it the next one.
            os.killpg(first.pid, signal.SIGSTOP)
            with pytest.raises(CheckpointCleanupError):
                await session.release()
            # Proof that the stopped worker took the request (nobody else could).
            assert sync_redis.llen(keys.maintenance_queue()) == 0
            first.kill()
            second.start()
            await wait_for(
                lambda: not any(k.startswith("checkpoint") for k in _keys_naming(sync_redis, sid)),
                within=30,
            )
    finally:
        first.kill()
        second.stop()


async def test_a_persistent_session_keeps_a_bounded_number_of_checkpoints(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    kept = settings.checkpoints_kept
    turns = FULL_SWEEP_EVERY + 2  # one turn's pruning also runs the full sweep
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(PERSISTENT)
        sid = session.id.value
        for index in range(turns):
            task = await session.start_task(_request(f"bounded-turn-{index}"))
            assert isinstance(await task.await_outcome(), Completed)
        documents = {str(key) for key in sync_redis.scan_iter(match=f"checkpoint:{sid}:*")}
        assert 1 <= len(documents) <= kept, sorted(documents)
        live_ids = {key.rsplit(":", 1)[1] for key in documents}
        for pattern in (f"checkpoint_write:{sid}:*", f"write_keys_zset:{sid}:*"):
            for key in sync_redis.scan_iter(match=pattern):
                assert str(key).split(":")[3] in live_ids, f"{key} of a pruned checkpoint"
        final = await session.start_task(_request("bounded-final"))
        assert isinstance(await final.await_outcome(), Completed)
        calls = boundary.calls_for(final.id.value)
        assert len(calls) == 1
        texts = calls[0]["texts"]
        assert isinstance(texts, list)
        for index in range(turns):
            assert f"bounded-turn-{index}" in texts
        assert texts.count("native-result") == turns
        await session.release()


async def test_interactions_and_grants_leave_only_expiring_task_keys_after_release(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """An approval answered for the session (a grant), one cancelled while pending: after
    the release the sessions' keys (grants included) are gone, and each task leaves only
    its record, stream, interactions and responses, all expiring with the retention."""
    keys = Keys(settings.namespace)
    async with CeleryHarness(
        settings, profile="guarding-granted", run_metadata=boundary.run_metadata
    ) as harness:
        granting = await harness.create_session(SessionSpec())
        answered = await granting.start_task(_request("lifetime-approved"))
        await wait_for(lambda: bool(answered.pending_interactions))
        await answered.respond(
            answered.pending_interactions[0].interaction_id,
            ApprovalResponse(ApprovalDecision.APPROVE_FOR_SESSION),
        )
        assert isinstance(await answered.await_outcome(), Completed)
        assert sync_redis.exists(keys.grants(granting.id.value))
        other = await harness.create_session(SessionSpec())
        pending = await other.start_task(_request("lifetime-pending"))
        await wait_for(lambda: bool(pending.pending_interactions))
        await other.release()  # cancels the paused task first
        assert isinstance(await pending.await_outcome(), Cancelled)
        await granting.release()
        sids = (granting.id.value, other.id.value)
    for sid in sids:
        assert _keys_naming(sync_redis, sid) == set(), sid
    tasks = [answered.id.value, pending.id.value]
    task_keys = set().union(*(_keys_naming(sync_redis, task_id) for task_id in tasks))
    allowed = {
        key(task_id)
        for task_id in tasks
        for key in (keys.task, keys.events, keys.interactions, keys.responses, keys.tool_attempts)
    }
    assert task_keys <= allowed, sorted(task_keys - allowed)
    assert {keys.interactions(task_id) for task_id in tasks} <= task_keys
    _assert_kept_only_for_retention(sync_redis, settings, task_keys)
    _assert_not_in_shared_sets(sync_redis, settings, tasks)
