"""Runs: create, wait, stream (on a thread or stateless), read, list, join, cancel."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.responses import JSONResponse, StreamingResponse

from harness.task import CeleryTask
from wire.codec import dumps, loads

from ..problems import Issue, ProblemError, invalid
from ..sse import EventStream, FinalChunk
from .access import Service, Tenant
from .bodies import RunCreate, ThreadCreate
from .openapi import RunId, ThreadId, answered, empty, streamed
from .records import RunRecord, ThreadRecord
from .service import LangGraphService, Position, encode, shielded_cancel
from .status import RunStatus
from .threads import create_thread, iso
from .translate import MODES, event_position

log = logging.getLogger(__name__)

router = APIRouter(tags=["langgraph"])

_EVENT_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}(\.[0-9]{1,6})?")

LastEventId = Annotated[str | None, Header(alias="Last-Event-ID")]


def run_json(record: RunRecord, run_status: RunStatus) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "thread_id": record.thread_id,
        "assistant_id": record.assistant_id,
        "created_at": iso(record.created_ms),
        "updated_at": iso(record.created_ms),
        "status": run_status.value,
        "metadata": record.metadata,
        "multitask_strategy": record.multitask_strategy,
        "kwargs": {},
    }


def _locations(record: RunRecord, tail: str) -> dict[str, str]:
    run_path = f"/threads/{record.thread_id}/runs/{record.run_id}"
    content = f"/runs/{record.run_id}" if record.stateless else run_path
    return {"Location": f"{run_path}/{tail}", "Content-Location": content}


async def _thread_for_run(
    service: LangGraphService, tenant: str, thread_id: str, body: RunCreate
) -> ThreadRecord:
    record = await service.records.thread(tenant, thread_id)
    if record is not None:
        return record
    if body.if_not_exists != "create":
        return await service.thread(tenant, thread_id)  # 404
    await create_thread(ThreadCreate(thread_id=thread_id, if_exists="do_nothing"), tenant, service)
    return await service.thread(tenant, thread_id)


def _position(last_event_id: str | None) -> Position | None:
    if last_event_id is None or last_event_id.strip() in ("", "-1"):
        return None
    value = last_event_id.strip()
    if _EVENT_ID.fullmatch(value) is None:
        raise invalid(
            [Issue(path="header.Last-Event-ID", message="an event id of this run's stream, or -1")]
        )
    return event_position(value)


def _stream(
    service: LangGraphService,
    tenant: str,
    record: RunRecord,
    modes: frozenset[str],
    after: Position | None,
    cancel: CeleryTask | None,
) -> EventStream:
    async def body() -> AsyncIterator[bytes]:
        ended = False
        try:
            async for events in service.events(tenant, record, modes, after):
                if events and events[-1].event == "end":
                    ended = True
                    yield FinalChunk(encode(events))
                    return
                if events:
                    yield encode(events)
        finally:
            if cancel is not None and not ended:
                await shielded_cancel(service, cancel)

    return EventStream(body(), headers=_locations(record, "stream"))


WAIT_KEEPALIVE = timedelta(seconds=5)
"""How often a waiting response (``runs.wait``, ``join``, ``cancel(wait=True)``) sends a
newline while the run goes on, as langgraph-api does: proxies keep the connection open,
and the status and ``Location`` are out at once, so a body cut off is fetched again."""


async def _wait(
    service: LangGraphService, tenant: str, record: RunRecord, request: Request, cancel: bool
) -> StreamingResponse:
    """Answer at once with the status and the ``Location`` to fetch again (the run's
    ``join``), then newlines while the run goes on, then the final values as JSON
    (whitespace before a JSON value is JSON)."""
    task = await service.api.handles.task(tenant, record.task_id) if cancel else None

    async def body() -> AsyncIterator[bytes]:
        waiting = asyncio.ensure_future(service.final_values(tenant, record))
        try:
            while True:
                done, _ = await asyncio.wait({waiting}, timeout=WAIT_KEEPALIVE.total_seconds())
                if done:
                    break
                yield b"\n"
            try:
                values = waiting.result()
            except Exception as error:  # the status is out: the SDK reads ``__error__``
                log.exception("run %s: waiting for its values failed", record.run_id)
                values = {"__error__": _error_of(error)}
            yield dumps(values).encode()
        except BaseException:
            waiting.cancel()
            if task is not None:
                await shielded_cancel(service, task)
            raise

    return StreamingResponse(
        body(), media_type="application/json", headers=_locations(record, "join")
    )


def _error_of(error: Exception) -> dict[str, str]:
    if isinstance(error, ProblemError):
        return {"error": error.kind.value, "message": error.detail}
    return {"error": type(error).__name__, "message": str(error)}


# -- runs on a thread -------------------------------------------------------------------
@router.post("/threads/{thread_id}/runs", responses=answered(404, 409, 413), summary="Create a run")
async def create_run(
    thread_id: ThreadId, body: RunCreate, tenant: Tenant, service: Service
) -> JSONResponse:
    thread = await _thread_for_run(service, tenant, thread_id, body)
    record, _ = await service.create_run(tenant, thread, body)
    headers = _locations(record, "stream")
    return JSONResponse(run_json(record, await service.status(tenant, record)), headers=headers)


@router.post(
    "/threads/{thread_id}/runs/stream",
    response_class=EventStream,
    responses=streamed(404, 409, 413),
    summary="Create a run and stream it",
)
async def stream_run(
    thread_id: ThreadId, body: RunCreate, tenant: Tenant, service: Service
) -> EventStream:
    thread = await _thread_for_run(service, tenant, thread_id, body)
    record, task = await service.create_run(tenant, thread, body)
    cancel = task if body.on_disconnect == "cancel" else None
    return _stream(service, tenant, record, body.modes(), None, cancel)


@router.post(
    "/threads/{thread_id}/runs/wait",
    responses=answered(404, 409, 413),
    summary="Create a run and wait for it",
)
async def wait_run(
    thread_id: ThreadId, body: RunCreate, tenant: Tenant, service: Service, request: Request
) -> StreamingResponse:
    thread = await _thread_for_run(service, tenant, thread_id, body)
    record, _ = await service.create_run(tenant, thread, body)
    return await _wait(service, tenant, record, request, body.on_disconnect == "cancel")


# -- stateless runs ---------------------------------------------------------------------
@router.post("/runs", responses=answered(404, 413), summary="Create a stateless run")
async def create_stateless(body: RunCreate, tenant: Tenant, service: Service) -> JSONResponse:
    record, _ = await service.create_run(tenant, None, body)
    headers = _locations(record, "stream")
    return JSONResponse(run_json(record, await service.status(tenant, record)), headers=headers)


@router.post(
    "/runs/stream",
    response_class=EventStream,
    responses=streamed(404, 413),
    summary="Create a stateless run and stream it",
)
async def stream_stateless(body: RunCreate, tenant: Tenant, service: Service) -> EventStream:
    record, task = await service.create_run(tenant, None, body)
    cancel = task if body.on_disconnect == "cancel" else None
    return _stream(service, tenant, record, body.modes(), None, cancel)


@router.post(
    "/runs/wait", responses=answered(404, 413), summary="Create a stateless run and wait for it"
)
async def wait_stateless(
    body: RunCreate, tenant: Tenant, service: Service, request: Request
) -> StreamingResponse:
    record, _ = await service.create_run(tenant, None, body)
    return await _wait(service, tenant, record, request, body.on_disconnect == "cancel")


# -- reading runs -----------------------------------------------------------------------
@router.get("/threads/{thread_id}/runs", responses=answered(404), summary="List a thread's runs")
async def list_runs(
    thread_id: ThreadId,
    tenant: Tenant,
    service: Service,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    offset: Annotated[int, Query(ge=0)] = 0,
    status_filter: Annotated[str | None, Query(alias="status")] = None,
) -> list[dict[str, Any]]:
    thread = await service.records.thread(tenant, thread_id)
    records = await service.records.runs(tenant, thread_id) if thread is not None else []
    if thread is None and not records:
        await service.thread(tenant, thread_id)  # 404
    listed = []
    for record in reversed(records):
        run_status = await service.status(tenant, record)
        if status_filter is None or run_status.value == status_filter:
            listed.append(run_json(record, run_status))
    return listed[offset : offset + limit]


@router.get("/threads/{thread_id}/runs/{run_id}", responses=answered(404), summary="Get a run")
async def get_run(
    thread_id: ThreadId, run_id: RunId, tenant: Tenant, service: Service
) -> dict[str, Any]:
    record = await service.run(tenant, thread_id, run_id)
    return run_json(record, await service.status(tenant, record))


@router.get(
    "/threads/{thread_id}/runs/{run_id}/join",
    responses=answered(404),
    summary="Wait for a run's end",
)
async def join_run(
    thread_id: ThreadId, run_id: RunId, tenant: Tenant, service: Service, request: Request
) -> StreamingResponse:
    record = await service.run(tenant, thread_id, run_id)
    return await _wait(service, tenant, record, request, cancel=False)


def _modes(record: RunRecord, stream_mode: list[str] | None) -> frozenset[str]:
    given: list[str] = []
    for value in stream_mode or []:
        text = value.strip()
        if text.startswith("["):
            parsed = loads(text)
            given.extend(str(mode) for mode in parsed) if isinstance(parsed, list) else None
        elif text:
            given.append(text)
    unknown = [mode for mode in given if mode not in MODES]
    if unknown:
        raise invalid(
            [Issue(path="query.stream_mode", message=f"not served: {', '.join(unknown)}")]
        )
    return frozenset(given or record.stream_modes)


@router.get(
    "/threads/{thread_id}/runs/{run_id}/stream",
    response_class=EventStream,
    responses=streamed(404),
    summary="Join a run's stream",
)
async def join_stream(
    thread_id: ThreadId,
    run_id: RunId,
    tenant: Tenant,
    service: Service,
    last_event_id: LastEventId = None,
    stream_mode: Annotated[list[str] | None, Query()] = None,
    cancel_on_disconnect: bool = False,
) -> EventStream:
    """The run's events after ``Last-Event-ID`` (``-1`` or none: from its first event)."""
    record = await service.run(tenant, thread_id, run_id)
    after = _position(last_event_id)
    task = await service.api.handles.task(tenant, record.task_id) if cancel_on_disconnect else None
    return _stream(service, tenant, record, _modes(record, stream_mode), after, task)


@router.get(
    "/runs/{run_id}/stream",
    response_class=EventStream,
    responses=streamed(404),
    summary="Join a run's stream (no thread given)",
)
async def join_stream_without_thread(
    run_id: RunId,
    tenant: Tenant,
    service: Service,
    last_event_id: LastEventId = None,
    stream_mode: Annotated[list[str] | None, Query()] = None,
) -> EventStream:
    record = await service.run(tenant, None, run_id)
    return _stream(
        service, tenant, record, _modes(record, stream_mode), _position(last_event_id), None
    )


@router.post(
    "/threads/{thread_id}/runs/{run_id}/cancel",
    responses={
        200: {"description": "wait=true: the final values."},
        **empty(202, "Cancellation requested.", 404),
    },
    summary="Cancel a run",
)
async def cancel_run(
    thread_id: ThreadId,
    run_id: RunId,
    tenant: Tenant,
    service: Service,
    request: Request,
    wait: bool = False,
    action: str = "interrupt",
) -> Response:
    """Request the run's task's cancellation (``action=interrupt``); with ``wait``, answer
    with its final values. ``rollback`` is refused: effects are not undone."""
    if action != "interrupt":
        raise invalid(
            [
                Issue(
                    path="query.action",
                    message="only interrupt is supported: a run's effects are not undone",
                )
            ]
        )
    record = await service.run(tenant, thread_id, run_id)
    run_status = await service.status(tenant, record)
    if run_status in (RunStatus.PENDING, RunStatus.RUNNING):
        task = await service.api.handles.task(tenant, record.task_id)
        await task.request_cancellation()
    if wait:
        return await _wait(service, tenant, record, request, cancel=False)
    return Response(status_code=status.HTTP_202_ACCEPTED)


__all__ = ["router"]
