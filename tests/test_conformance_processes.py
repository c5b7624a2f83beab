"""Conformance suites again, with the workers as separate OS processes.

Two ``celery worker`` processes (prefork, two children each) serve their own namespace
and queue; the controlled model runs in those children and records what it received
in Redis, exactly as in-process.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agent_harness_protocol import AgentHarness, SessionSpec
from agent_harness_protocol.conformance import (
    AcceptanceFixture,
    AccountingConformanceTests,
    AccountingFixture,
    AccountingSequenceConformanceTests,
    ApprovalScopeConformanceTests,
    CleanupBudgetConformanceTests,
    FixtureResource,
    InteractionConformanceTests,
    InteractionRaceFixture,
    OutcomeConformanceTests,
    OutcomeFixture,
    OutputCase,
    RepeatedApprovalFixture,
    ResponseAcceptanceConformanceTests,
    ResponseAcceptanceFixture,
    RuntimeObservation,
)

from tooling.worker_process import WorkerProcess
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.fixtures import acceptance, accounting, observed, outcome, scoped_harness
from .support.interaction_fixtures import interactions
from .support.runtime_persistence import RuntimePersistenceAdmittingProcessRestart

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def process_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"namespace": settings.namespace + "-proc", "queue": settings.queue + ".proc"}
    )


@pytest.fixture(scope="module")
def worker_processes(process_settings: Settings) -> Iterator[None]:
    with (
        WorkerProcess(process_settings, concurrency=2, name="conformance-a"),
        WorkerProcess(process_settings, concurrency=2, name="conformance-b"),
    ):
        yield


class _InProcesses:
    settings: Settings
    model: ModelBoundary

    @pytest.fixture(autouse=True)
    def _bind(
        self, process_settings: Settings, boundary: ModelBoundary, worker_processes: None
    ) -> None:
        self.settings = process_settings
        self.model = boundary


class TestRuntimePersistenceInWorkerProcesses(
    _InProcesses, RuntimePersistenceAdmittingProcessRestart
):
    def boundary(self) -> FixtureResource[RuntimeObservation]:
        return observed(self.model)

    def harness(self, boundary: RuntimeObservation) -> AgentHarness:
        return scoped_harness(self.settings, self.model, "confirmed")


class TestCleanupUnconfirmedInWorkerProcesses(_InProcesses, CleanupBudgetConformanceTests):
    def cleanup_fixture(self) -> FixtureResource[AcceptanceFixture]:
        spec = SessionSpec(instructions="AHP_CLEANUP")
        return acceptance(self.settings, self.model, "unconfirmed", spec)


class TestAccountingInWorkerProcesses(_InProcesses, AccountingConformanceTests):
    def accounting_fixture(self) -> FixtureResource[AccountingFixture]:
        return accounting(self.settings, self.model)


class TestAccountingSequenceInWorkerProcesses(_InProcesses, AccountingSequenceConformanceTests):
    def sequence_fixture(self) -> FixtureResource[AcceptanceFixture]:
        return acceptance(self.settings, self.model, "sequence", SessionSpec())


class TestOutcomeInWorkerProcesses(_InProcesses, OutcomeConformanceTests):
    def outcome_fixture(self, output_case: OutputCase) -> FixtureResource[OutcomeFixture]:
        return outcome(self.settings, self.model, output_case)


class TestInteractionInWorkerProcesses(_InProcesses, InteractionConformanceTests):
    def interaction_fixture(self) -> FixtureResource[InteractionRaceFixture]:
        return interactions(self.settings, self.model)


class TestApprovalScopeInWorkerProcesses(_InProcesses, ApprovalScopeConformanceTests):
    def approval_fixture(self) -> FixtureResource[RepeatedApprovalFixture]:
        return interactions(self.settings, self.model)


class TestResponseAcceptanceInWorkerProcesses(_InProcesses, ResponseAcceptanceConformanceTests):
    def response_fixture(self) -> FixtureResource[ResponseAcceptanceFixture]:
        return interactions(self.settings, self.model)
