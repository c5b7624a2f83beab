"""Persistent sessions and honest starts: the AHP context, persistence-failure,
start-acceptance and runtime-persistence suites, bound to real Redis, the real
``AsyncRedisSaver`` and real Celery workers. Only the chat model is controlled.

Stored history is hidden by renaming the session's langgraph-checkpoint-redis keys out
of the saver's reach (and restored by renaming them back); delivery is controlled at
the harness's publisher seam (``tests.support.start_control``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
import redis
from agent_harness_protocol import (
    AgentHarness,
    PersistenceRequirement,
    SessionRequirements,
    SessionSpec,
    UnconfirmedStart,
)
from agent_harness_protocol.conformance import (
    ContextConformanceTests,
    ContextFixture,
    FixtureResource,
    PersistenceFailureConformanceTests,
    PersistenceFailureFixture,
    RuntimeObservation,
    StartAcceptanceConformanceTests,
    StartAcceptanceFixture,
)

from harness import CeleryHarness
from wire.keys import Keys
from wire.records import TaskField
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.fixtures import observed
from .support.runtime_persistence import RuntimePersistenceAdmittingProcessRestart
from .support.start_control import StartBoundary
from .support.sweeps import watch_past_sweeps

PERSISTENT = SessionRequirements(persistence=PersistenceRequirement())
_PERSISTENT_SPEC = SessionSpec(instructions="AHP_PERSISTENT_CONTEXT", requirements=PERSISTENT)
_HIDDEN = "ahp-test:hidden:"


def _session_ids(client: redis.Redis, keys: Keys) -> set[str]:
    prefix = keys.session("")
    found: set[str] = set()
    for key in client.scan_iter(match=prefix + "*", count=1000):
        rest = str(key)[len(prefix) :]
        if ":" not in rest:
            found.add(rest)
    return found


@dataclass
class PersistenceBinding:
    """One fixture: a harness, the start boundary, and the stored-context controls."""

    settings: Settings
    model: ModelBoundary
    client: redis.Redis
    spec: SessionSpec
    start: StartBoundary = field(default_factory=StartBoundary)
    supports_changed_instructions: bool = True
    harness: AgentHarness = field(init=False)
    _known: set[str] = field(default_factory=set)
    _hidden: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._known = _session_ids(self.client, Keys(self.settings.namespace))
        self.harness = self.recreate_harness()

    @property
    def observation(self) -> ModelBoundary:
        return self.model

    @property
    def submitted_starts(self) -> Sequence[UnconfirmedStart]:
        return tuple(self.start.submitted)

    def recreate_harness(self) -> AgentHarness:
        return CeleryHarness(
            self.settings,
            profile="confirmed",
            publisher_factory=self.start.publisher,
            run_metadata=self.model.run_metadata,
        )

    def hide_stored_context(self) -> None:
        """Move every checkpoint key of this fixture's sessions out of the saver's reach."""
        sessions = _session_ids(self.client, Keys(self.settings.namespace)) - self._known
        for session_id in sessions:
            for key in self.client.scan_iter(match=f"checkpoint*:{session_id}:*", count=1000):
                self.client.rename(key, _HIDDEN + str(key))
                self._hidden.append(str(key))
        assert self._hidden, "no stored context found to hide"

    def restore_stored_context(self) -> None:
        for key in self._hidden:
            self.client.rename(_HIDDEN + key, key)
        self._hidden.clear()


async def _never_ran(binding: PersistenceBinding) -> None:
    """The suite looks at a start that never reached the broker only in its first
    seconds; a sweeper republish would come later. Watch past the sweeper's period (a
    canary proves a sweep looked at these starts), then read the model boundary and
    the task records: that work never ran."""
    lost = binding.start.never_accepted()
    if not lost:
        return
    await watch_past_sweeps(binding.settings, binding.model, binding.client)
    keys = Keys(binding.settings.namespace)
    for task_id in lost:
        assert not binding.model.calls_for(task_id), task_id
        record = binding.client.hgetall(keys.task(task_id))
        assert record.get(TaskField.STATE) in {None, "starting", "cancelled"}, record
        assert record.get(TaskField.DELIVERIES) in {None, "0"}, record


@asynccontextmanager
async def persistence_binding(
    settings: Settings, model: ModelBoundary, client: redis.Redis, spec: SessionSpec
) -> AsyncIterator[PersistenceBinding]:
    binding = PersistenceBinding(settings, model, client, spec)
    passed = False
    try:
        yield binding
        passed = True
    finally:
        model.release()
        binding.start.accept()
        if binding._hidden:
            binding.restore_stored_context()
        if passed:
            await _never_ran(binding)
        await binding.harness.aclose()


class _Bound:
    settings: Settings
    model: ModelBoundary
    client: redis.Redis

    @pytest.fixture(autouse=True)
    def _bind(self, settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis) -> None:
        self.settings = settings
        self.model = boundary
        self.client = sync_redis

    def _binding(self, spec: SessionSpec = _PERSISTENT_SPEC) -> FixtureResource[PersistenceBinding]:
        return persistence_binding(self.settings, self.model, self.client, spec)


class TestContext(_Bound, ContextConformanceTests):
    def context_fixture(self) -> FixtureResource[ContextFixture]:
        return self._binding()


class TestPersistenceFailure(_Bound, PersistenceFailureConformanceTests):
    def persistence_fixture(self) -> FixtureResource[PersistenceFailureFixture]:
        return self._binding()


class TestStartAcceptance(_Bound, StartAcceptanceConformanceTests):
    def acceptance_fixture(self) -> FixtureResource[StartAcceptanceFixture]:
        return self._binding(SessionSpec(instructions="AHP_START_ACCEPTANCE"))


class TestStartAcceptanceOfPersistentSessions(_Bound, StartAcceptanceConformanceTests):
    def acceptance_fixture(self) -> FixtureResource[StartAcceptanceFixture]:
        return self._binding()


class TestRuntimePersistence(_Bound, RuntimePersistenceAdmittingProcessRestart):
    def boundary(self) -> FixtureResource[RuntimeObservation]:
        return observed(self.model)

    def harness(self, boundary: RuntimeObservation) -> AgentHarness:
        return CeleryHarness(
            self.settings, profile="confirmed", run_metadata=self.model.run_metadata
        )
