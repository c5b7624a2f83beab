"""Support discovery, validation and admission, all derived from one profile.

``support``, ``validate()`` and the admission checks of ``create_session`` and
``start_task`` read the same declaration, so they cannot disagree.
"""

from __future__ import annotations

from agent_harness_protocol import (
    SUPPORTED,
    ApprovalRequirement,
    Capability,
    CompatibilityIssue,
    CompatibilityIssueKind,
    CompatibilityReport,
    ConditionalSupport,
    ContextRetentionDisposition,
    ContextRetentionRequirement,
    NetworkAccess,
    QuestionRequirement,
    SessionSpec,
    StructuredOutputRequirement,
    Support,
    SupportReport,
    SupportScope,
    TaskRequest,
    TextInput,
    TextOutputRequirement,
    UnknownSupport,
    Unsupported,
    UserHistoryVisibility,
    UserHistoryVisibilityRequirement,
)

from wire.profiles import AgentProfile, ToolApproval
from wire.structured_output import schema_problems

MAX_INPUT_CHARACTERS = 1_000_000
MAX_INSTRUCTIONS_CHARACTERS = 100_000
"""Session instructions are sent with every model call and stored in the session record."""


def _declared_support(declared: object, satisfies: object, capability: str) -> Support:
    if declared == satisfies:
        return SUPPORTED
    if declared in {ContextRetentionDisposition.UNKNOWN, UserHistoryVisibility.UNKNOWN}:
        return UnknownSupport(
            f"{capability} depends on how the deployment's Redis persists data and whether the "
            "model provider or tracing keep inputs; declare it in the agent profile"
        )
    return Unsupported(f"the agent profile declares {capability} {declared}")


def _declared_issue(path: str, declared: object, requirement: object) -> CompatibilityIssue:
    if declared in {ContextRetentionDisposition.UNKNOWN, UserHistoryVisibility.UNKNOWN}:
        return CompatibilityIssue(
            path,
            f"cannot confirm {requirement}: the agent profile does not declare this disposition",
            CompatibilityIssueKind.UNCONFIRMED,
        )
    return CompatibilityIssue(path, f"the agent profile declares {declared}, not {requirement}")


def _gated_tools(profile: AgentProfile) -> list[str]:
    return [tool.name for tool in profile.tools if tool.approval is ToolApproval.REQUIRED]


def _approval_support(profile: AgentProfile) -> Support:
    gated = _gated_tools(profile)
    if not gated:
        return Unsupported(
            "the agent profile declares no approval-gated tool; DENY_ALL is admitted"
        )
    granted = [tool.name for tool in profile.tools if tool.session_grant is not None]
    return ConditionalSupport(
        SupportScope.SESSION,
        f"calls of {', '.join(gated)} pause the task (AWAITING_RESPONSE, no worker held) "
        "until the caller approves once, declines or cancels; approve-for-session only for "
        + (", ".join(granted) if granted else "no tool")
        + " (a described grant, enforced by the workers); AGENT_REVIEWED is rejected",
    )


def _question_support(profile: AgentProfile) -> Support:
    if not profile.questions:
        return Unsupported("the agent profile does not let the agent ask the caller")
    return ConditionalSupport(
        SupportScope.SESSION,
        "the agent's ask_caller tool pauses the task until the caller answers",
    )


def support_report(profile: AgentProfile) -> SupportReport:
    return SupportReport(
        {
            Capability.CALLER_APPROVAL: _approval_support(profile),
            Capability.QUESTIONS: _question_support(profile),
            Capability.PERSISTENCE: ConditionalSupport(
                SupportScope.SESSION,
                "persistent contexts live in Redis and reopen in any harness of any process "
                "(across_harness_restart and across_process_restart are kept); "
                "concurrent_access is rejected: a context's tasks run one at a time",
            ),
            Capability.WORKSPACE: Unsupported("the model-only graph establishes no workspace"),
            Capability.EXECUTION_CONSTRAINT: Unsupported(
                "the harness cannot enforce the model provider's filesystem or network policy"
            ),
            # The worker asks the model for a document and judges it against the schema
            # (jsonschema, Draft 2020-12) before settling: see wire/structured_output.py.
            Capability.STRUCTURED_OUTPUT: SUPPORTED,
            Capability.DIAGNOSTICS: SUPPORTED,
            Capability.CONTEXT_RETENTION: _declared_support(
                profile.retention, ContextRetentionDisposition.EPHEMERAL, "context retention"
            ),
            Capability.USER_HISTORY_VISIBILITY: _declared_support(
                profile.history_visibility,
                UserHistoryVisibility.HIDDEN,
                "user-history visibility",
            ),
        }
    )


def validate_session(profile: AgentProfile, spec: SessionSpec) -> CompatibilityReport:
    """Every issue of ``spec`` against ``profile``; nothing is started or written."""
    issues: list[CompatibilityIssue] = []
    requirements = spec.requirements
    if spec.instructions is not None and len(spec.instructions) > MAX_INSTRUCTIONS_CHARACTERS:
        issues.append(
            CompatibilityIssue(
                "instructions",
                f"instructions of {len(spec.instructions)} characters exceed the limit of "
                f"{MAX_INSTRUCTIONS_CHARACTERS}",
            )
        )
    if spec.model is not None and spec.model != profile.model_id:
        issues.append(
            CompatibilityIssue(
                "model",
                f"model {spec.model!r} is not the model of profile {profile.name!r}"
                + (f" ({profile.model_id!r})" if profile.model_id else " (none declared)"),
            )
        )
    if requirements.approval is ApprovalRequirement.AGENT_REVIEWED:
        issues.append(
            CompatibilityIssue(
                "requirements.approval", "no agent reviews approvals here; the caller decides"
            )
        )
    elif requirements.approval is ApprovalRequirement.CALLER_DECIDES and not _gated_tools(profile):
        issues.append(
            CompatibilityIssue(
                "requirements.approval",
                f"profile {profile.name!r} declares no approval-gated tool to route",
            )
        )
    if requirements.questions is not QuestionRequirement.NOT_REQUIRED and not profile.questions:
        issues.append(
            CompatibilityIssue(
                "requirements.questions",
                f"profile {profile.name!r} does not let the agent ask the caller",
            )
        )
    issues.extend(_persistence_issues(spec))
    if requirements.workspace is not None:
        issues.append(
            CompatibilityIssue("requirements.workspace", "the graph establishes no workspace")
        )
    if requirements.execution is not None:
        dimensions: list[str] = []
        if requirements.execution.filesystem is not None:
            dimensions.append("filesystem")
        if requirements.execution.network is not None:
            dimensions.append(
                "network allowed"
                if requirements.execution.network is NetworkAccess.ALLOWED
                else "network denied"
            )
        issues.append(
            CompatibilityIssue(
                "requirements.execution",
                f"cannot enforce provider execution constraint: {', '.join(dimensions)}",
            )
        )
    if (
        requirements.retention is ContextRetentionRequirement.EPHEMERAL
        and profile.retention is not ContextRetentionDisposition.EPHEMERAL
    ):
        issues.append(
            _declared_issue("requirements.retention", profile.retention, requirements.retention)
        )
    if (
        requirements.history_visibility is UserHistoryVisibilityRequirement.HIDDEN
        and profile.history_visibility is not UserHistoryVisibility.HIDDEN
    ):
        issues.append(
            _declared_issue(
                "requirements.history_visibility",
                profile.history_visibility,
                requirements.history_visibility,
            )
        )
    return CompatibilityReport(issues)


def _persistence_issues(spec: SessionSpec) -> list[CompatibilityIssue]:
    """Persistent context lives in Redis: any harness in any process of the deployment
    can reopen it (across harness and process restarts). Its tasks are exclusive."""
    persistence = spec.requirements.persistence
    issues: list[CompatibilityIssue] = []
    if persistence is None:
        return issues
    if persistence.concurrent_access:
        issues.append(
            CompatibilityIssue(
                "requirements.persistence.concurrent_access",
                "handles of one persistent context share it, but its tasks run one at a time",
            )
        )
    if spec.requirements.retention is ContextRetentionRequirement.EPHEMERAL:
        issues.append(
            CompatibilityIssue(
                "requirements.retention",
                "a persistent session keeps its context after release; it cannot be ephemeral",
            )
        )
    return issues


def validate_task(request: TaskRequest) -> CompatibilityReport:
    issues: list[CompatibilityIssue] = []
    if not isinstance(request.input, TextInput):
        issues.append(CompatibilityIssue("input", "only TextInput is accepted"))
    elif len(request.input.text) > MAX_INPUT_CHARACTERS:
        issues.append(
            CompatibilityIssue(
                "input.text",
                f"input of {len(request.input.text)} characters exceeds the limit of "
                f"{MAX_INPUT_CHARACTERS}",
            )
        )
    output = request.requirements.output
    if isinstance(output, StructuredOutputRequirement):
        issues.extend(
            CompatibilityIssue("requirements.output.schema", problem)
            for problem in schema_problems(output.schema)
        )
    elif not isinstance(output, TextOutputRequirement):
        issues.append(
            CompatibilityIssue(
                "requirements.output", f"unknown output requirement {type(output).__name__}"
            )
        )
    return CompatibilityReport(issues)
