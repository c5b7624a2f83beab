"""Session routes: create, read, release, reopen."""

from __future__ import annotations

from typing import Annotated, Literal

from agent_harness_protocol import (
    AgentUsage,
    PersistenceRequirement,
    PersistentSessionRef,
    SessionRequirements,
    SessionSpec,
    StorageNamespace,
)
from fastapi import APIRouter, Depends, Path, Response, status

from harness.errors import CheckpointCleanupError, UnknownSessionError
from harness.session import CelerySession
from wire import keys
from wire.keys import is_valid_id
from wire.narrowing import NarrowedSessionSpec
from wire.provider import PROVIDER

from .auth import tenant
from .models import Released, SessionResource, usage_body
from .openapi_docs import problems
from .problems import (
    Issue,
    ProblemError,
    ProblemType,
    invalid,
    not_found_session,
    too_large,
)
from .request_bodies import CreateSession, ReopenSession
from .state import ApiState, api_state

ID_PATTERN = f"^{keys.ID_PATTERN}$"

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])

Tenant = Annotated[str, Depends(tenant)]
State = Annotated[ApiState, Depends(api_state)]
SessionIdPath = Annotated[
    str,
    Path(
        pattern=ID_PATTERN,
        max_length=128,
        description=f"A session id: {keys.ID_RULE}.",
    ),
]


def require_id(kind: str, value: str) -> str:
    if not is_valid_id(value):
        raise invalid([Issue(path=f"path.{kind}_id", message=keys.ID_RULE)])
    return value


def check_instructions(api: ApiState, instructions: str | None) -> None:
    if instructions is None:
        return
    size = len(instructions.encode("utf-8"))
    if size > api.settings.max_instructions_bytes:
        raise too_large(
            f"instructions of {size} bytes exceed the limit of "
            f"{api.settings.max_instructions_bytes}",
            "body.instructions",
        )


async def _resource(api: ApiState, tenant: str, session_id: str) -> SessionResource:
    return SessionResource.of(await api.harness.session_info(session_id, tenant=tenant))


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SessionResource,
    responses=problems(413),
    summary="Create a session",
)
async def create_session(
    body: CreateSession, tenant: Tenant, api: State, response: Response
) -> SessionResource:
    """Admit the session and write its record; nothing runs until a task starts.

    A persistent session keeps its context after ``DELETE`` for ``POST .../reopen``."""
    check_instructions(api, body.instructions)
    persistence = (
        PersistenceRequirement(across_harness_restart=True, across_process_restart=True)
        if body.persistent
        else None
    )
    spec = NarrowedSessionSpec(
        instructions=body.instructions,
        requirements=SessionRequirements(persistence=persistence),
        narrowing=body.narrowing(),
    )
    session = await api.harness.create_session(spec, tenant=tenant)
    assert isinstance(session, CelerySession)
    api.handles.add_session(tenant, session)
    response.headers["Location"] = f"/v1/sessions/{session.id.value}"
    # What create_session just wrote, without reading it back.
    return SessionResource(
        id=session.id.value,
        persistent=session.persistent,
        closed=False,
        active_task_id=None,
        queued_task_ids=[],
        turns=0,
        usage=usage_body(AgentUsage.ZERO),
    )


@router.get(
    "/{session_id}",
    response_model=SessionResource,
    responses=problems(404),
    summary="Get a session",
)
async def get_session(session_id: SessionIdPath, tenant: Tenant, api: State) -> SessionResource:
    return await _resource(api, tenant, require_id("session", session_id))


@router.delete(
    "/{session_id}",
    response_model=Released,
    responses=problems(404),
    summary="Release a session",
)
async def release_session(session_id: SessionIdPath, tenant: Tenant, api: State) -> Released:
    """Settle its active task within the cleanup budget (cancelling it), then delete what
    the session stored; a persistent session keeps its context for reopen. Its tasks stay
    readable until their retention ends."""
    require_id("session", session_id)
    if api.handles.cached_session(tenant, session_id) is not None:
        # Released by another replica meanwhile? Then it is gone for this one too.
        try:
            info = await api.harness.session_info(session_id, tenant=tenant)
        except UnknownSessionError:
            info = None
        if info is None or (info.closed and not info.persistent):
            api.handles.drop_session(tenant, session_id)
            raise not_found_session(session_id)
    session = await api.handles.session(tenant, session_id)
    cleanup: Literal["done", "kept", "pending"] = "kept" if session.persistent else "done"
    try:
        await session.release()
    except CheckpointCleanupError:
        cleanup = "pending"
    api.handles.drop_session(tenant, session_id)
    return Released(id=session_id, context_kept=session.persistent, checkpoint_cleanup=cleanup)


@router.post(
    "/{session_id}/reopen",
    response_model=SessionResource,
    responses=problems(404, 409, 413),
    summary="Reopen a persistent session",
)
async def reopen_session(
    session_id: SessionIdPath,
    tenant: Tenant,
    api: State,
    body: ReopenSession | None = None,
) -> SessionResource:
    """Open this API's handle on a persistent session's context again (after ``DELETE``,
    or from any replica). With ``instructions``, reconfigure it (only while no other
    handle of the context is open). Reopening a session this API holds open is a no-op."""
    require_id("session", session_id)
    instructions = None if body is None else body.instructions
    check_instructions(api, instructions)
    info = await api.harness.session_info(session_id, tenant=tenant)
    if not info.persistent:
        raise ProblemError(
            ProblemType.SESSION_NOT_PERSISTENT,
            409,
            f"session {session_id} is not persistent; only persistent sessions reopen",
            session_id=session_id,
        )
    if instructions is None:
        await api.handles.session(tenant, session_id)
    else:
        if api.handles.cached_session(tenant, session_id) is not None:
            raise ProblemError(
                ProblemType.SESSION_OPEN,
                409,
                f"session {session_id} is open; release it (DELETE) before reconfiguring it",
                session_id=session_id,
            )
        reference = PersistentSessionRef(PROVIDER, StorageNamespace(api.core.namespace), session_id)
        spec = SessionSpec(
            instructions=instructions,
            requirements=SessionRequirements(
                persistence=PersistenceRequirement(
                    across_harness_restart=True, across_process_restart=True
                )
            ),
        )
        session = await api.harness.reopen_session(reference, spec)
        assert isinstance(session, CelerySession)
        api.handles.add_session(tenant, session)
    return await _resource(api, tenant, session_id)


__all__ = ["ID_PATTERN", "check_instructions", "require_id", "router"]
