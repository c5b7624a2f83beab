"""Threads: a LangGraph thread is a session of the tenant, with the client's metadata."""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime
from typing import Any

from agent_harness_protocol import SessionRequirements
from fastapi import APIRouter, Response, status

from harness.errors import CheckpointCleanupError, UnknownSessionError
from harness.info import TaskInfo
from wire.narrowing import NarrowedSessionSpec

from ..problems import Issue, ProblemError, ProblemType, invalid
from .access import Service, Tenant
from .bodies import ThreadCreate, ThreadSearch
from .openapi import ThreadId, answered, empty
from .records import ThreadExistsError, ThreadRecord, now_ms
from .service import LangGraphService, interrupt_of_request
from .status import thread_status

router = APIRouter(tags=["langgraph"])


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


async def thread_state(
    service: LangGraphService, tenant: str, record: ThreadRecord
) -> tuple[TaskInfo | None, dict[str, Any]]:
    """The thread's latest task and its state (``GET /threads/{id}/state``)."""
    info = await service.thread_task(tenant, record)
    values: dict[str, Any] = {}
    interrupts: list[dict[str, Any]] = []
    checkpoint = None
    if info is not None:
        runs = [
            r for r in await service.records.runs(tenant, record.thread_id) if r.task_id == info.id
        ]
        if runs:
            final = await service.final_values(tenant, runs[-1]) if info.state.is_terminal else None
            values = final if final is not None and "__error__" not in final else {}
        interrupts = [interrupt_of_request(r) for r in info.pending_interactions]
        values.pop("__interrupt__", None)
        checkpoint = {"thread_id": record.thread_id, "checkpoint_ns": "", "checkpoint_id": info.id}
    state = {
        "values": values,
        "next": ["tools"] if interrupts else [],
        "tasks": [
            {
                "id": info.id,
                "name": "tools",
                "path": [],
                "error": None,
                "interrupts": interrupts,
                "checkpoint": None,
                "state": None,
                "result": None,
            }
        ]
        if interrupts and info is not None
        else [],
        "checkpoint": checkpoint,
        "metadata": record.metadata if checkpoint else None,
        "created_at": iso(record.updated_ms) if checkpoint else None,
        "parent_checkpoint": None,
        "interrupts": interrupts,
    }
    return info, state


async def thread_json(
    service: LangGraphService, tenant: str, record: ThreadRecord
) -> dict[str, Any]:
    info, state = await thread_state(service, tenant, record)
    interrupts = state["interrupts"]
    return {
        "thread_id": record.thread_id,
        "created_at": iso(record.created_ms),
        "updated_at": iso(record.updated_ms),
        "metadata": record.metadata,
        "status": thread_status(info).value,
        "values": state["values"] or None,
        "interrupts": {info.id: interrupts} if interrupts and info is not None else {},
    }


@router.post("/threads", responses=answered(409), summary="Create a thread")
async def create_thread(body: ThreadCreate, tenant: Tenant, service: Service) -> dict[str, Any]:
    issues = [
        Issue(path=f"body.{name}", message=f"{name} is not supported")
        for name in ("ttl", "supersteps")
        if getattr(body, name) is not None
    ]
    if issues:
        raise invalid(issues)
    thread_id = body.thread_id or str(uuid.uuid4())
    metadata = dict(body.metadata)
    if body.graph_id is not None:
        metadata["graph_id"] = body.graph_id
    try:
        token = await service.records.reserve_thread(tenant, thread_id)
    except ThreadExistsError:
        existing = await service.records.thread(tenant, thread_id)
        if body.if_exists == "do_nothing" and existing is not None:
            return await thread_json(service, tenant, existing)
        raise ProblemError(
            ProblemType.CONFLICT, 409, f"thread {thread_id} already exists"
        ) from None
    try:
        session = await service.api.harness.create_session(
            NarrowedSessionSpec(requirements=SessionRequirements()), tenant=tenant
        )
    except BaseException:
        await service.records.release_reservation(tenant, thread_id, token)
        raise
    service.api.handles.add_session(tenant, session)
    created = now_ms()
    record = ThreadRecord(
        thread_id=thread_id,
        session_id=session.id.value,
        metadata=metadata,
        created_ms=created,
        updated_ms=created,
    )
    try:
        await service.records.create_thread(tenant, record, token)
    except ThreadExistsError:
        await session.release()
        raise ProblemError(
            ProblemType.CONFLICT, 409, f"thread {thread_id} already exists"
        ) from None
    return await thread_json(service, tenant, record)


@router.get("/threads/{thread_id}", responses=answered(404), summary="Get a thread")
async def get_thread(thread_id: ThreadId, tenant: Tenant, service: Service) -> dict[str, Any]:
    return await thread_json(service, tenant, await service.thread(tenant, thread_id))


@router.get("/threads/{thread_id}/state", responses=answered(404), summary="Get a thread's state")
async def get_thread_state(thread_id: ThreadId, tenant: Tenant, service: Service) -> dict[str, Any]:
    _, state = await thread_state(service, tenant, await service.thread(tenant, thread_id))
    return state


@router.delete(
    "/threads/{thread_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=empty(204, "Deleted.", 404),
    summary="Delete a thread",
)
async def delete_thread(thread_id: ThreadId, tenant: Tenant, service: Service) -> Response:
    """Release the thread's session (its running run is cancelled within the cleanup
    budget) and delete the thread and its runs' records."""
    record = await service.thread(tenant, thread_id)
    try:
        session = await service.api.handles.session(tenant, record.session_id)
        # A cleanup left pending is finished by the maintenance queue.
        with contextlib.suppress(CheckpointCleanupError):
            await session.release()
        service.api.handles.drop_session(tenant, record.session_id)
    except UnknownSessionError:
        pass
    await service.records.delete_thread(tenant, thread_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/threads/search", responses=answered(), summary="Search threads")
async def search_threads(
    body: ThreadSearch, tenant: Tenant, service: Service
) -> list[dict[str, Any]]:
    ids = await service.records.thread_ids(tenant)
    if body.sort_order != "asc":
        ids.reverse()
    if body.ids is not None:
        wanted = set(body.ids)
        ids = [i for i in ids if i in wanted]
    found: list[dict[str, Any]] = []
    skipped = 0
    for thread_id in ids:
        record = await service.records.thread(tenant, thread_id)
        if record is None:
            continue
        if body.metadata and any(record.metadata.get(k) != v for k, v in body.metadata.items()):
            continue
        thread = await thread_json(service, tenant, record)
        if body.status is not None and thread["status"] != body.status:
            continue
        if skipped < body.offset:
            skipped += 1
            continue
        found.append(thread)
        if len(found) >= body.limit:
            break
    return found


__all__ = ["router", "thread_json"]
