"""The AHP conformance suites, bound to real Redis, real Celery workers and the real
``AsyncRedisSaver``. Only the chat model is controlled; every observation is read from
what that model received inside the worker.

The runtime suite requires confirmed cancellation: the controlled model's coroutine is
the whole native work, so its profile declares
``COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED``. ``UNCONFIRMED`` is exercised by the
cleanup and lifecycle bindings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest
from agent_harness_protocol import (
    READ_ONLY,
    SUPPORTED,
    ApprovalRequirement,
    Capability,
    CompatibilityStatus,
    ConditionalSupport,
    ContextRetentionRequirement,
    DiagnosticsRequirement,
    ExecutionConstraint,
    NetworkAccess,
    PersistenceRequirement,
    QuestionRequirement,
    SessionRequirements,
    SessionSpec,
    StructuredOutputRequirement,
    Support,
    SupportReport,
    SupportScope,
    TaskRequest,
    TaskRequirements,
    TextInput,
    UnknownSupport,
    Unsupported,
    UserHistoryVisibilityRequirement,
    WorkspaceRequirement,
)
from agent_harness_protocol.conformance import (
    AcceptanceFixture,
    AccountingConformanceTests,
    AccountingFixture,
    AccountingSequenceConformanceTests,
    CleanupBudgetConformanceTests,
    FixtureProfile,
    FixtureResource,
    LifecycleConformanceTests,
    LifecycleFixture,
    ObservationLoadConformanceTests,
    OutcomeConformanceTests,
    OutcomeFixture,
    OutputCase,
    RequirementCase,
    RequirementsConformanceTests,
    RuntimeRequirementsFixture,
)

from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.fixtures import (
    LifecycleBinding,
    RequirementProfile,
    RequirementsBinding,
    acceptance,
    accounting,
    outcome,
    scoped_harness,
)
from .support.profiles import MODEL_ID

OK = CompatibilityStatus.COMPATIBLE
NO = CompatibilityStatus.INCOMPATIBLE
UNSURE = CompatibilityStatus.UNCONFIRMED
NO_TASK_REQUIREMENTS = TaskRequirements()


class _Bound:
    """Gives a suite class the real settings and model boundary of the test."""

    settings: Settings
    model: ModelBoundary

    @pytest.fixture(autouse=True)
    def _bind(self, settings: Settings, boundary: ModelBoundary) -> None:
        self.settings = settings
        self.model = boundary


# -- runtime ---------------------------------------------------------------------------


# ``RuntimePersistenceConformanceTests`` (which runs every runtime-profile case too) is
# bound in ``tests/test_persistence.py``.


# -- cleanup ---------------------------------------------------------------------------

_CLEANUP_SPEC = SessionSpec(instructions="AHP_CLEANUP")


class TestCleanupConfirmedCancellation(_Bound, CleanupBudgetConformanceTests):
    def cleanup_fixture(self) -> FixtureResource[AcceptanceFixture]:
        return acceptance(self.settings, self.model, "confirmed", _CLEANUP_SPEC)


class TestCleanupUnconfirmedCancellation(_Bound, CleanupBudgetConformanceTests):
    def cleanup_fixture(self) -> FixtureResource[AcceptanceFixture]:
        return acceptance(self.settings, self.model, "unconfirmed", _CLEANUP_SPEC)


class TestCleanupWithModelIgnoringCancellation(_Bound, CleanupBudgetConformanceTests):
    def cleanup_fixture(self) -> FixtureResource[AcceptanceFixture]:
        return acceptance(self.settings, self.model, "ignoring", _CLEANUP_SPEC)


# -- lifecycle -------------------------------------------------------------------------


class TestLifecycle(_Bound, LifecycleConformanceTests):
    def lifecycle_fixture(self) -> FixtureResource[LifecycleFixture]:
        return self._lifecycle()

    @asynccontextmanager
    async def _lifecycle(self) -> AsyncIterator[LifecycleFixture]:
        harness = scoped_harness(self.settings, self.model, "lifecycle")
        try:
            yield LifecycleBinding(harness, self.model)
        finally:
            self.model.release()
            await harness.aclose()


# -- accounting and outcomes -----------------------------------------------------------


class TestAccounting(_Bound, AccountingConformanceTests):
    def accounting_fixture(self) -> FixtureResource[AccountingFixture]:
        return accounting(self.settings, self.model)


class TestAccountingSequence(_Bound, AccountingSequenceConformanceTests):
    """The ``sequence`` profile's model calls a real tool twice (its effects recorded in
    the worker), measured, then partly measured, then answers with a measured zero."""

    def sequence_fixture(self) -> FixtureResource[AcceptanceFixture]:
        return acceptance(self.settings, self.model, "sequence", SessionSpec())


class TestOutcome(_Bound, OutcomeConformanceTests):
    def outcome_fixture(self, output_case: OutputCase) -> FixtureResource[OutcomeFixture]:
        return outcome(self.settings, self.model, output_case)


# -- observation load ------------------------------------------------------------------


class TestObservationLoad(_Bound, ObservationLoadConformanceTests):
    def load_fixture(self) -> FixtureResource[AcceptanceFixture]:
        spec = SessionSpec(
            requirements=SessionRequirements(diagnostics=DiagnosticsRequirement.REQUIRED)
        )
        return acceptance(self.settings, self.model, "load", spec)


# -- requirements ----------------------------------------------------------------------


def _spec(requirements: SessionRequirements) -> SessionSpec:
    return SessionSpec(requirements=requirements)


def _case(
    case_id: str,
    session: CompatibilityStatus,
    spec: SessionSpec,
    capability: Capability | None = None,
    task: CompatibilityStatus = OK,
    requirements: TaskRequirements = NO_TASK_REQUIREMENTS,
) -> RequirementCase:
    return RequirementCase(
        case_id,
        spec,
        TaskRequest(TextInput(f"requirement-case-{case_id}"), requirements),
        session_validation=session,
        task_validation=task,
        capability=capability,
    )


def _common_cases() -> list[RequirementCase]:
    structured = TaskRequirements(StructuredOutputRequirement('{"type":"object"}'))
    return [
        _case("default", OK, SessionSpec()),
        _case("instructions", OK, SessionSpec(instructions="AHP_REQUIREMENT_INSTRUCTION")),
        _case("matching-model", OK, SessionSpec(model=MODEL_ID)),
        _case("mismatched-model", NO, SessionSpec(model="another-model")),
        _case(
            "diagnostics",
            OK,
            _spec(SessionRequirements(diagnostics=DiagnosticsRequirement.REQUIRED)),
            Capability.DIAGNOSTICS,
        ),
        _case(
            "deny-all-approval",
            OK,
            _spec(SessionRequirements(approval=ApprovalRequirement.DENY_ALL)),
        ),
        _case(
            "caller-approval",
            NO,
            _spec(SessionRequirements(approval=ApprovalRequirement.CALLER_DECIDES)),
            Capability.CALLER_APPROVAL,
        ),
        _case(
            "agent-reviewed-approval",
            NO,
            _spec(SessionRequirements(approval=ApprovalRequirement.AGENT_REVIEWED)),
            Capability.CALLER_APPROVAL,
        ),
        _case(
            "caller-answers",
            NO,
            _spec(SessionRequirements(questions=QuestionRequirement.CALLER_ANSWERS)),
            Capability.QUESTIONS,
        ),
        _case(
            "persistence",
            OK,
            _spec(SessionRequirements(persistence=PersistenceRequirement())),
            Capability.PERSISTENCE,
        ),
        _case(
            "persistence-across-process-restart",
            OK,
            _spec(
                SessionRequirements(persistence=PersistenceRequirement(across_process_restart=True))
            ),
            Capability.PERSISTENCE,
        ),
        _case(
            "persistence-concurrent-access",
            NO,
            _spec(SessionRequirements(persistence=PersistenceRequirement(concurrent_access=True))),
            Capability.PERSISTENCE,
        ),
        _case(
            "persistent-but-ephemeral",
            NO,
            _spec(
                SessionRequirements(
                    persistence=PersistenceRequirement(),
                    retention=ContextRetentionRequirement.EPHEMERAL,
                )
            ),
            Capability.PERSISTENCE,
        ),
        _case(
            "workspace",
            NO,
            _spec(SessionRequirements(workspace=WorkspaceRequirement(working_directory="."))),
            Capability.WORKSPACE,
        ),
        _case(
            "read-only-filesystem",
            NO,
            _spec(SessionRequirements(execution=ExecutionConstraint(filesystem=READ_ONLY))),
            Capability.EXECUTION_CONSTRAINT,
        ),
        _case(
            "denied-network",
            NO,
            _spec(SessionRequirements(execution=ExecutionConstraint(network=NetworkAccess.DENIED))),
            Capability.EXECUTION_CONSTRAINT,
        ),
        # Served: the worker judges the answer against the schema (the controlled model's
        # plain answer is reported INVALID; tests/test_structured_output.py checks that).
        _case(
            "structured-output",
            OK,
            SessionSpec(),
            Capability.STRUCTURED_OUTPUT,
            requirements=structured,
        ),
        _case(
            "structured-output-unusable-schema",
            OK,
            SessionSpec(),
            Capability.STRUCTURED_OUTPUT,
            task=NO,
            requirements=TaskRequirements(StructuredOutputRequirement('{"type":"objekt"}')),
        ),
    ]


def _disposition_cases(
    retention: CompatibilityStatus, visibility: CompatibilityStatus
) -> list[RequirementCase]:
    return [
        _case(
            "ephemeral-retention",
            retention,
            _spec(SessionRequirements(retention=ContextRetentionRequirement.EPHEMERAL)),
            Capability.CONTEXT_RETENTION,
        ),
        _case(
            "hidden-history",
            visibility,
            _spec(SessionRequirements(history_visibility=UserHistoryVisibilityRequirement.HIDDEN)),
            Capability.USER_HISTORY_VISIBILITY,
        ),
    ]


_UNKNOWN = UnknownSupport("not declared")
_UNSUPPORTED = Unsupported("declared otherwise")


def _expected_support(retention: Support, visibility: Support) -> SupportReport:
    return SupportReport(
        {
            Capability.CALLER_APPROVAL: Unsupported("no approval route"),
            Capability.QUESTIONS: Unsupported("no question route"),
            Capability.PERSISTENCE: ConditionalSupport(SupportScope.SESSION, "no concurrency"),
            Capability.WORKSPACE: Unsupported("no workspace"),
            Capability.EXECUTION_CONSTRAINT: Unsupported("no enforceable policy"),
            Capability.STRUCTURED_OUTPUT: SUPPORTED,
            Capability.DIAGNOSTICS: SUPPORTED,
            Capability.CONTEXT_RETENTION: retention,
            Capability.USER_HISTORY_VISIBILITY: visibility,
        }
    )


def _profiles() -> Sequence[RequirementProfile]:
    def profile(
        name: str,
        description: str,
        retention: tuple[Support, CompatibilityStatus],
        visibility: tuple[Support, CompatibilityStatus],
    ) -> RequirementProfile:
        return RequirementProfile(
            FixtureProfile(
                name,
                description,
                _expected_support(retention[0], visibility[0]),
                [*_common_cases(), *_disposition_cases(retention[1], visibility[1])],
            ),
            name,
        )

    return (
        profile(
            "undeclared",
            "profile declares neither retention nor visibility",
            (_UNKNOWN, UNSURE),
            (_UNKNOWN, UNSURE),
        ),
        profile(
            "ephemeral-hidden",
            "profile declares ephemeral context and hidden inputs",
            (SUPPORTED, OK),
            (SUPPORTED, OK),
        ),
        profile(
            "materialized-visible",
            "profile declares durable context and inputs visible elsewhere",
            (_UNSUPPORTED, NO),
            (_UNSUPPORTED, NO),
        ),
        profile(
            "ephemeral-undeclared",
            "profile declares ephemeral context, visibility undeclared",
            (SUPPORTED, OK),
            (_UNKNOWN, UNSURE),
        ),
    )


class TestRequirements(_Bound, RequirementsConformanceTests):
    def requirement_fixture(self) -> FixtureResource[RuntimeRequirementsFixture]:
        return self._requirements()

    @asynccontextmanager
    async def _requirements(self) -> AsyncIterator[RuntimeRequirementsFixture]:
        try:
            yield RequirementsBinding(self.settings, self.model, _profiles)
        finally:
            self.model.release()
