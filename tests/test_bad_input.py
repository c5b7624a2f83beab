"""Bad input gets the protocol's typed errors and changes nothing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

import pytest
import redis
from agent_harness_protocol import (
    ApprovalDecision,
    ApprovalRequirement,
    ApprovalResponse,
    Completed,
    IncompatibleRequirementError,
    InteractionId,
    PersistenceRequirement,
    ProviderId,
    RequirementUnconfirmedError,
    SessionBlockedError,
    SessionId,
    SessionRequirements,
    SessionSpec,
    TaskId,
    TaskInput,
    TaskRequest,
    TextInput,
    UserHistoryVisibilityRequirement,
    WorkspaceRequirement,
)
from celery import Celery

from harness import CeleryHarness
from harness.admission import MAX_INPUT_CHARACTERS, MAX_INSTRUCTIONS_CHARACTERS
from harness.errors import PersistentConfigurationError, UnknownPersistentSessionError
from wire.celery_config import RUN_TASK, celery_config
from wire.errors import ProfileError
from wire.keys import Keys, require_valid_id
from wire.settings import Settings
from wire.store import ClaimResult

from .support.boundary import ModelBoundary
from .support.claims import ClaimCounts
from .support.keyspace import namespace_keys
from .support.waiting import wait_for


@pytest.mark.parametrize(
    "value", ["", " ", "\t", "a b", "../etc", "x:y", "é", "x" * 129, "ahp\n", "x\n", "\nx"]
)
def test_hostile_or_blank_ids_never_become_keys(value: str) -> None:
    with pytest.raises(ValueError, match="invalid"):
        require_valid_id("session", value)
    with pytest.raises(ValueError, match="invalid namespace"):
        Keys(value)


def test_a_namespace_with_a_trailing_newline_is_refused_not_another_deployment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AHP_NAMESPACE", "ahp\n")
    with pytest.raises(ValueError, match="invalid namespace"):
        Settings()


def test_a_blank_profile_name_is_refused_not_the_default(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ProfileError, match="blank"):
        CeleryHarness(settings, profile="")
    monkeypatch.setenv("AHP_PROFILE", "")
    with pytest.raises(ValueError, match="blank"):
        Settings()


async def test_oversized_instructions_are_refused_and_nothing_is_written(
    settings: Settings, sync_redis: redis.Redis
) -> None:
    spec = SessionSpec(instructions="x" * (MAX_INSTRUCTIONS_CHARACTERS + 1))
    async with CeleryHarness(settings, profile="confirmed") as harness:
        before = namespace_keys(sync_redis, settings.namespace)
        with pytest.raises(IncompatibleRequirementError, match="exceed the limit") as caught:
            await harness.create_session(spec)
        assert [issue.path for issue in caught.value.issues] == ["instructions"]
        assert [issue.path for issue in harness.validate(spec).issues] == ["instructions"]
        assert namespace_keys(sync_redis, settings.namespace) == before


@pytest.mark.parametrize("blank", ["", "   "])
def test_protocol_ids_reject_blank_values(blank: str) -> None:
    with pytest.raises(ValueError, match="must not be blank"):
        SessionId(blank)
    with pytest.raises(ValueError, match="must not be blank"):
        TaskId(blank)


def test_unknown_profile_is_a_typed_error_naming_the_known_ones(settings: Settings) -> None:
    with pytest.raises(ProfileError, match=r"known profiles: .*confirmed"):
        CeleryHarness(settings, profile="no-such-profile")


async def test_every_unkeepable_requirement_is_listed_and_nothing_is_written(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    spec = SessionSpec(
        model="another-model",
        requirements=SessionRequirements(
            approval=ApprovalRequirement.CALLER_DECIDES,
            persistence=PersistenceRequirement(concurrent_access=True),
            workspace=WorkspaceRequirement(working_directory="."),
        ),
    )
    async with CeleryHarness(settings, profile="confirmed") as harness:
        before = namespace_keys(sync_redis, settings.namespace)
        with pytest.raises(IncompatibleRequirementError) as caught:
            await harness.create_session(spec)
        paths = {issue.path for issue in caught.value.issues}
        assert paths == {
            "model",
            "requirements.approval",
            "requirements.persistence.concurrent_access",
            "requirements.workspace",
        }
        assert harness.validate(spec).issues == caught.value.issues
        assert namespace_keys(sync_redis, settings.namespace) == before
        assert boundary.calls() == []


async def test_undeclared_disposition_is_unconfirmed_not_assumed(settings: Settings) -> None:
    spec = SessionSpec(
        requirements=SessionRequirements(history_visibility=UserHistoryVisibilityRequirement.HIDDEN)
    )
    async with CeleryHarness(settings, profile="undeclared") as harness:
        with pytest.raises(RequirementUnconfirmedError):
            await harness.create_session(spec)


@dataclass(frozen=True, slots=True)
class _ImageInput(TaskInput):
    url: str


async def test_oversized_or_non_text_input_is_rejected_and_the_session_stays_usable(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        huge = TaskRequest(TextInput("x" * (MAX_INPUT_CHARACTERS + 1)))
        with pytest.raises(IncompatibleRequirementError, match="exceeds the limit"):
            await session.start_task(huge)
        with pytest.raises(IncompatibleRequirementError, match="TextInput"):
            await session.start_task(TaskRequest(_ImageInput("file:///x.png")))
        assert boundary.calls() == []
        task = await session.start_task(TaskRequest(TextInput("still usable")))
        assert isinstance(await task.await_outcome(), Completed)


async def test_a_session_whose_record_is_gone_refuses_to_start(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        sync_redis.delete(Keys(settings.namespace).session(session.id.value))
        with pytest.raises(SessionBlockedError, match="unknown"):
            await session.start_task(TaskRequest(TextInput("no record")))
        assert not sync_redis.exists(Keys(settings.namespace).session(session.id.value))
        assert boundary.calls() == []


async def test_responding_to_an_unknown_interaction_is_a_value_error(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("no interactions")))
        with pytest.raises(ValueError, match="no pending interaction"):
            await task.respond(
                InteractionId("made-up"), ApprovalResponse(ApprovalDecision.APPROVE_ONCE)
            )
        assert isinstance(await task.await_outcome(), Completed)


def _workers(keys: Keys, key: str) -> bool:
    """A key the workers keep whatever they are sent: their counters, the liveness of
    their maintenance consumers (written once a worker serves), their presence reports
    (``workers.presence``), and the dead letters of the messages they dropped (a dropped
    message is recorded, by id and cause, never by body: ``tests/test_dead_letters.py``)."""
    return (
        key in keys.statistics()
        or key == keys.dead_letters()
        or key == keys.workers()
        or key.startswith(keys.worker_presence(""))
        or key == keys.maintenance_consumers()
        or key.startswith(keys.maintenance_consumer(""))
    )


async def test_worker_drops_messages_for_unknown_or_hostile_task_ids(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        runtime = harness._open()
        before = namespace_keys(sync_redis, settings.namespace)
        malformed_before = int(sync_redis.get(Keys(settings.namespace).malformed_messages()) or 0)
        claims = ClaimCounts(sync_redis, settings.namespace)
        await runtime.publisher.publish("0123456789abcdef0123456789abcdef")
        # The harness refuses to publish a hostile id; any other broker client can.
        other_client = Celery("another-client", set_as_current=False)
        other_client.conf.update(celery_config(settings))
        try:
            await asyncio.to_thread(
                other_client.send_task,
                RUN_TASK,
                kwargs={"namespace": settings.namespace, "task_id": "../../evil key"},
                task_id="../../evil key",
                queue=settings.queue,
            )
        finally:
            other_client.close()
        # The worker consumes both and writes nothing but its counters: the unknown id
        # found no task to claim; the hostile id never reached the task code (the
        # intake dropped and counted it).
        keys = Keys(settings.namespace)
        await claims.consumed(ClaimResult.MISSING, 1, "the message of an unknown task")
        try:
            await wait_for(
                lambda: int(sync_redis.get(keys.malformed_messages()) or 0) > malformed_before
            )
        except TimeoutError:
            raise AssertionError("the hostile message was never dropped and counted") from None
        assert not {
            key
            for key in namespace_keys(sync_redis, settings.namespace) - before
            if not _workers(keys, key)
        }
        # A real task still runs after them.
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("after bad messages")))
        assert isinstance(await asyncio.wait_for(task.await_outcome(), 30), Completed)
        created = namespace_keys(sync_redis, settings.namespace) - before
        assert all(
            session.id.value in key or task.id.value in key or _workers(keys, key)
            for key in created
        ), created
        assert int(sync_redis.get(keys.malformed_messages()) or 0) - malformed_before == 1
        assert claims.since()[ClaimResult.MISSING] == 1
        assert len(boundary.calls()) == 1


_PERSISTENT = SessionSpec(requirements=SessionRequirements(persistence=PersistenceRequirement()))


@pytest.mark.parametrize("hostile", ["../etc", "x:y", "a b", "*", "x" * 129])
async def test_reopen_of_a_hostile_or_foreign_reference_is_a_value_error_and_writes_nothing(
    settings: Settings, sync_redis: redis.Redis, hostile: str
) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(_PERSISTENT)
        reference = session.persistent_ref
        assert reference is not None
        before = namespace_keys(sync_redis, settings.namespace)
        with pytest.raises(ValueError, match="invalid persistent session id"):
            await harness.reopen_session(replace(reference, id=hostile), _PERSISTENT)
        with pytest.raises(ValueError, match="cannot be reopened"):
            await harness.reopen_session(
                replace(reference, provider=ProviderId("another-provider")), _PERSISTENT
            )
        assert namespace_keys(sync_redis, settings.namespace) == before


async def test_reopen_of_a_non_persistent_session_or_with_a_non_persistent_spec_is_rejected(
    settings: Settings, sync_redis: redis.Redis, worker: None
) -> None:
    # The worker deletes the plain session's checkpoint thread when the harness closes.
    async with CeleryHarness(settings, profile="confirmed") as harness:
        plain = await harness.create_session(SessionSpec())
        assert plain.persistent_ref is None
        persistent = await harness.create_session(_PERSISTENT)
        reference = persistent.persistent_ref
        assert reference is not None
        before = namespace_keys(sync_redis, settings.namespace)
        with pytest.raises(UnknownPersistentSessionError):
            await harness.reopen_session(replace(reference, id=plain.id.value), _PERSISTENT)
        with pytest.raises(IncompatibleRequirementError, match=r"requirements\.persistence"):
            await harness.reopen_session(reference, SessionSpec())
        assert namespace_keys(sync_redis, settings.namespace) == before


async def test_reopen_by_another_agent_profile_is_rejected(settings: Settings) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(_PERSISTENT)
        reference = session.persistent_ref
        assert reference is not None
        async with CeleryHarness(settings, profile="unconfirmed") as other:
            with pytest.raises(PersistentConfigurationError, match="agent profile"):
                await other.reopen_session(reference, _PERSISTENT)
