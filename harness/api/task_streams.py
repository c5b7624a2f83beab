"""Task routes that answer with Server-Sent Events: start or run a task and stream its
events in the same response, and follow a task's events (resumable with Last-Event-ID)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from agent_harness_protocol import (
    HarnessTransportError,
)
from fastapi import APIRouter, Header, Request

from harness.errors import (
    UnknownTaskError,
)
from harness.task import CeleryTask, StreamRead

from .events import ENTRY_ID, EVENT_SCHEMA, FIRST_EVENT_ID, sse_event
from .events import task_events as event_stream
from .models import TaskResource
from .openapi_docs import problems
from .problems import (
    Issue,
    invalid,
)
from .request_bodies import RunTask, StartTask
from .sessions import SessionIdPath, require_id
from .sse import EventStream
from .state import ApiState
from .task_admission import (
    RUN_DOC,
    CancelOnDisconnect,
    IdempotencyKey,
    State,
    TaskIdPath,
    Tenant,
    start_as_run,
    start_in_session,
)

router = APIRouter(tags=["tasks"])
log = logging.getLogger(__name__)

_CREATED_AND_EVENTS: dict[str, Any] = {
    "description": "Server-Sent Events: ``task_created`` (id ``0-0``, data: the task "
    "resource), then the task's events as ``GET /v1/tasks/{task_id}/events`` sends "
    "them; each ``id`` resumes the stream there with Last-Event-ID.",
    "content": {"text/event-stream": {"schema": EVENT_SCHEMA}},
}
"""The answer of the routes that start a task and stream its events."""


@router.post(
    "/v1/sessions/{session_id}/tasks/stream",
    response_class=EventStream,
    responses={
        200: _CREATED_AND_EVENTS,
        **problems(404, 409, 413),
    },
    summary="Start a task in a session and stream its events",
)
async def start_task_streaming(
    session_id: SessionIdPath,
    body: StartTask,
    tenant: Tenant,
    api: State,
    idempotency_key: IdempotencyKey = None,
    cancel_on_disconnect: CancelOnDisconnect = False,
) -> EventStream:
    """Start a task as ``POST /v1/sessions/{session_id}/tasks`` does and answer with its
    events in the same response, ending after the terminal one: one round trip for the
    create, run and stream flow. Refusals are the same problem responses, sent before any
    event. A dropped stream resumes with ``GET /v1/tasks/{task_id}/events`` and the last
    event id received (``0-0`` for the ``task_created`` event)."""
    task = await start_in_session(api, tenant, session_id, body, idempotency_key)
    return await _created_and_events(api, tenant, task, cancel_on_disconnect)


async def _created_and_events(
    api: ApiState, tenant: str, task: CeleryTask, cancel_on_disconnect: bool
) -> EventStream:
    """The ``task_created`` event, then the task's events until the terminal one."""
    if task.replayed or task.created_at is None:
        info = await api.harness.task_info(task.id.value, tenant=tenant)
        resource = TaskResource.of(info, replayed=task.replayed)
    else:
        # Just started: the start's reply says all the record would (no round trip).
        resource = TaskResource.started(task)
    created = sse_event(FIRST_EVENT_ID, "task_created", resource.model_dump_json())
    # This process's handle already reads the task's stream: relay its reads.
    events = _events(api, tenant, task.id.value, FIRST_EVENT_ID, task.follow_reads())
    return EventStream(
        _cancelling(_prepend(created, events), task if cancel_on_disconnect else None),
        headers={"Location": f"/v1/tasks/{task.id.value}"},
    )


@router.post(
    "/v1/tasks/stream",
    response_class=EventStream,
    responses={
        200: _CREATED_AND_EVENTS,
        **problems(413),
    },
    summary="Run a task in a session of its own and stream its events",
    description="Create a session, start the task in it and answer with its events until "
    "the terminal one: the create, run and stream flow in one request (LangGraph's "
    "stateless ``POST /runs/stream``). Refusals are problem responses, sent before any "
    "event. A dropped stream resumes with ``GET /v1/tasks/{task_id}/events`` and the last "
    "event id received (``0-0`` for the ``task_created`` event)." + RUN_DOC,
)
async def run_task_streaming(
    body: RunTask,
    tenant: Tenant,
    api: State,
    request: Request,
    cancel_on_disconnect: CancelOnDisconnect = False,
) -> EventStream:
    """Create a session, start the task in it and answer with its events."""
    task = await start_as_run(api, tenant, body, request)
    return await _created_and_events(api, tenant, task, cancel_on_disconnect)


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``first`` at once (a queued task may start much later), then ``rest``."""
    yield first
    async for chunk in rest:
        yield chunk


async def _cancelling(
    events: AsyncIterator[bytes], task: CeleryTask | None
) -> AsyncIterator[bytes]:
    """``events``; with ``task``, a stream that ends before the task settled (the client
    went away) requests its cancellation, shielded from the stream's own cancellation."""
    try:
        async for event in events:
            yield event
    finally:
        if task is not None and not task.settled:
            await asyncio.shield(_cancel_quietly(task))


async def _cancel_quietly(task: CeleryTask) -> None:
    try:
        await task.request_cancellation()
    except HarnessTransportError as error:
        log.warning("task %s: cancelling after a disconnect failed: %s", task.id.value, error)


def _events(
    api: ApiState,
    tenant: str,
    task_id: str,
    after: str,
    reads: tuple[str, AsyncIterator[StreamRead]] | None = None,
) -> AsyncIterator[bytes]:
    async def settled() -> bool:
        try:
            info = await api.harness.task_info(task_id, tenant=tenant)
        except UnknownTaskError:
            return True  # its retention ended: no more entries will come
        return info.state.is_terminal

    return event_stream(
        api.events_redis,
        api.keys,
        task_id,
        after,
        settled,
        reads,
        reader=api.harness.stream_reader,
    )


@router.get(
    "/v1/tasks/{task_id}/events",
    response_class=EventStream,
    responses={
        200: {
            "description": "Server-Sent Events; each ``id`` resumes the stream after it.",
            "content": {"text/event-stream": {"schema": EVENT_SCHEMA}},
        },
        **problems(404),
    },
    summary="Follow a task's events (SSE)",
)
async def task_events(
    task_id: TaskIdPath,
    tenant: Tenant,
    api: State,
    last_event_id: Annotated[
        str | None,
        Header(
            max_length=64,
            description="Resume after this event id (sent by EventSource on reconnect).",
        ),
    ] = None,
) -> EventStream:
    """Every event of the task from its first (or after ``Last-Event-ID``), ending after the
    terminal one, whose data holds the outcome. Resuming never skips or repeats an event
    while the task is retained."""
    require_id("task", task_id)
    after = "0-0"
    if last_event_id:
        if not ENTRY_ID.fullmatch(last_event_id):
            raise invalid(
                [Issue(path="header.Last-Event-ID", message="not an event id of this API")]
            )
        after = last_event_id
    await api.harness.task_info(task_id, tenant=tenant)
    return EventStream(_events(api, tenant, task_id, after))


__all__ = ["router"]
