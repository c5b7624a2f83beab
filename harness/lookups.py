"""Reading the records a harness hands out by id: owned by the tenant asked, or unknown.

A session or task of another tenant is answered exactly like one that does not exist
(``UnknownSessionError`` / ``UnknownTaskError``), so ids reveal nothing across tenants.
The reopen script's refusals are raised here as the AHP errors they mean.
"""

from __future__ import annotations

from agent_harness_protocol import SessionBlockedError, SessionId

from wire.keys import is_valid_id
from wire.records import SessionField, TaskField
from wire.store import ReopenResult

from .errors import (
    PersistentConfigurationError,
    SessionBusyError,
    StoredHistoryUnavailableError,
    UnknownPersistentSessionError,
    UnknownSessionError,
    UnknownTaskError,
)
from .redis_errors import reported
from .runtime import CallerRuntime


async def owned_session_record(
    runtime: CallerRuntime, session_id: str, tenant: str | None
) -> dict[str, str]:
    if not is_valid_id(session_id):
        raise UnknownSessionError(session_id)
    with reported("the session could not be read"):
        record = await runtime.store.session_record(session_id)
    if not record or (tenant is not None and record.get(SessionField.TENANT) != tenant):
        raise UnknownSessionError(session_id)
    return record


async def owned_task_record(
    runtime: CallerRuntime, task_id: str, tenant: str | None
) -> dict[str, str]:
    if not is_valid_id(task_id):
        raise UnknownTaskError(task_id)
    with reported("the task could not be read"):
        record = await runtime.store.task_record(task_id)
    if not record.get(TaskField.SESSION) or (
        tenant is not None and record.get(TaskField.TENANT) != tenant
    ):
        raise UnknownTaskError(task_id)
    return record


def raise_for_reopen(session_id: SessionId, result: ReopenResult, detail: str) -> None:
    if result is ReopenResult.OK:
        return
    if result is ReopenResult.UNKNOWN:
        raise UnknownPersistentSessionError(session_id.value)
    if result is ReopenResult.PROFILE:
        raise PersistentConfigurationError(
            session_id.value,
            "reference",
            "the context belongs to another agent profile or profile version",
        )
    if result is ReopenResult.CONFIGURED:
        raise PersistentConfigurationError(
            session_id.value,
            "spec",
            "another open handle of this context uses a different configuration",
        )
    if result is ReopenResult.UNCONFIRMED:
        raise SessionBlockedError(
            session_id, f"the start of task {detail} is unconfirmed; it may still run"
        )
    if result is ReopenResult.OUTLIVED:
        raise SessionBlockedError(
            session_id, "a previous graph run has not ended although its task was settled"
        )
    if result is ReopenResult.BUSY:
        raise SessionBusyError(session_id.value, detail)
    raise StoredHistoryUnavailableError(session_id.value)


__all__ = ["owned_session_record", "owned_task_record", "raise_for_reopen"]
