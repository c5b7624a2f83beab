"""A single-task session ends with its task, whoever settles it.

``create_session(single_task=True)`` makes the session behind the API's one-request runs
(``POST /v1/tasks``): it takes one task, and the Lua step that settles that task forgets
the session and queues the deletion of its checkpoint thread. So it leaves nothing behind
when a worker completes the task, when a caller cancels it before any worker claimed it,
and when the process that started it is gone before it ends. Observations come from
Redis itself (key listings, TTLs, the task record), never from the harness's own state.
"""

from __future__ import annotations

import pytest
import redis
from agent_harness_protocol import (
    Cancelled,
    Completed,
    PersistenceRequirement,
    SessionBlockedError,
    SessionRequirements,
    SessionSpec,
    TaskRequest,
    TextInput,
)

from harness import CeleryHarness
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings
from wire.store import BusyPolicy

from .support.boundary import ModelBoundary
from .support.fixtures import scoped_harness
from .support.waiting import wait_for

_TEST_PREFIX = "ahp-test:"


def _request(text: str) -> TaskRequest:
    return TaskRequest(TextInput(text))


def _keys_naming(client: redis.Redis, ident: str) -> set[str]:
    """Every key of the whole Redis whose name contains ``ident`` (checkpoint documents,
    writes and registries name the thread, which is the session id)."""
    return {
        str(key)
        for key in client.scan_iter(match=f"*{ident}*", count=1000)
        if not str(key).startswith(_TEST_PREFIX)
    }


def _only_retained_task_keys(
    client: redis.Redis, settings: Settings, session_id: str, task_id: str
) -> None:
    """Nothing of the session is left; the task's record and stream (and its tools'
    attempt counts) stay, with the retention TTL."""
    keys = Keys(settings.namespace)
    assert _keys_naming(client, session_id) == set()
    left = _keys_naming(client, task_id)
    retained = {keys.task(task_id), keys.events(task_id), keys.tool_attempts(task_id)}
    assert left <= retained, sorted(left)
    for key in left:
        ttl = client.ttl(key)
        assert isinstance(ttl, int)
        assert 0 < ttl <= settings.task_retention.total_seconds(), (key, ttl)
    assert client.zscore(keys.running(), task_id) is None
    assert client.zscore(keys.starting(), task_id) is None


async def test_a_completed_task_ends_its_session_and_deletes_its_thread(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with scoped_harness(settings, boundary, "agent") as harness:
        session = await harness.create_session(SessionSpec(), single_task=True)
        sid = session.id.value
        task = await session.start_task(_request("single-completed"))
        task_id = task.id.value
        # The first model call asks for a tool; the second waits for its script.
        boundary.script(
            task_id, {"op": "tool_call", "name": "record_effect", "args": {"label": "a"}}
        )
        # Meanwhile the session and its checkpoint thread exist.
        await wait_for(lambda: len(boundary.calls_for(task_id)) == 2)
        named = _keys_naming(sync_redis, sid)
        assert any(key.startswith("checkpoint") for key in named), sorted(named)
        assert sync_redis.hget(Keys(settings.namespace).session(sid), "single") == "1"
        boundary.script(task_id, {"op": "complete", "text": "recorded."})
        assert isinstance(await task.await_outcome(), Completed)
        # No release call: the settle forgot the session, a worker deleted the thread.
        await wait_for(lambda: not _keys_naming(sync_redis, sid))
        _only_retained_task_keys(sync_redis, settings, sid, task_id)
        await session.release()  # nothing left to do, and no error


async def test_the_session_ends_when_its_caller_is_gone_before_its_task(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    harness = CeleryHarness(settings, profile="confirmed")
    session = await harness.create_session(SessionSpec(), single_task=True)
    sid = session.id.value
    boundary.hold()
    task = await session.start_task(_request("single-caller-gone"))
    task_id = task.id.value
    await wait_for(lambda: boundary.calls_for(task_id))
    await harness.detach()  # the caller goes away: nobody will release the session
    boundary.release()
    await wait_for(lambda: sync_redis.hget(keys.task(task_id), TaskField.STATE) == "completed")
    await wait_for(lambda: not _keys_naming(sync_redis, sid))
    _only_retained_task_keys(sync_redis, settings, sid, task_id)


async def test_a_task_cancelled_before_any_claim_ends_its_session(
    worker: None, idle_queue_settings: Settings, sync_redis: redis.Redis
) -> None:
    """The caller's cancel script settles an unclaimed task: that step ends the session."""
    async with CeleryHarness(idle_queue_settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec(), single_task=True)
        sid = session.id.value
        task = await session.start_task(_request("single-cancelled-unclaimed"))
        await task.request_cancellation()
        assert isinstance(await task.await_outcome(), Cancelled)
        await wait_for(lambda: not _keys_naming(sync_redis, sid))
        _only_retained_task_keys(sync_redis, idle_queue_settings, sid, task.id.value)


async def test_a_task_cancelled_while_running_ends_its_session(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec(), single_task=True)
        sid = session.id.value
        boundary.hold()
        task = await session.start_task(_request("single-cancelled-running"))
        await wait_for(lambda: boundary.calls_for(task.id.value))
        await task.request_cancellation()
        assert isinstance(await task.await_outcome(), Cancelled)
        boundary.release()
        await wait_for(lambda: not _keys_naming(sync_redis, sid))
        _only_retained_task_keys(sync_redis, settings, sid, task.id.value)


async def test_a_single_task_session_takes_one_task(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec(), single_task=True)
        boundary.hold()
        first = await session.start_task(_request("single-first"))
        record_before = sync_redis.hgetall(keys.session(session.id.value))
        for policy in BusyPolicy:
            with pytest.raises(SessionBlockedError, match="takes one task"):
                await session.start_task(_request("single-second"), if_busy=policy)
        # Refused with nothing written: the record is unchanged and nothing is queued.
        assert sync_redis.hgetall(keys.session(session.id.value)) == record_before
        assert sync_redis.llen(keys.session_queue(session.id.value)) == 0
        boundary.release()
        assert isinstance(await first.await_outcome(), Completed)
        assert not [call for call in boundary.calls() if "single-second" in str(call)]


async def test_a_persistent_session_cannot_be_single_task(
    settings: Settings, sync_redis: redis.Redis
) -> None:
    persistent = SessionSpec(requirements=SessionRequirements(persistence=PersistenceRequirement()))
    keys = Keys(settings.namespace)
    before = {str(key) for key in sync_redis.scan_iter(match=f"{keys.namespace}:session:*")}
    async with CeleryHarness(settings, profile="confirmed") as harness:
        with pytest.raises(ValueError, match="cannot be persistent"):
            await harness.create_session(persistent, single_task=True)
    after = {str(key) for key in sync_redis.scan_iter(match=f"{keys.namespace}:session:*")}
    assert after == before
