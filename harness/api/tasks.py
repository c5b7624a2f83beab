"""Task routes: start (in a session), read with an optional wait, events, cancel, answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from agent_harness_protocol import (
    AnswerResponse,
    ApprovalDecision,
    ApprovalResponse,
    HarnessTransportError,
    InteractionId,
    InteractionResponse,
    InteractionResponseUnconfirmedError,
    SessionBlockedError,
    SessionRequirements,
    StructuredOutputRequirement,
    TaskRequest,
    TaskRequirements,
    TextInput,
)
from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response, status

from harness.errors import (
    InteractionClosedError,
    UnknownInteractionError,
    UnknownSessionError,
    UnknownTaskError,
)
from harness.runs import start_run
from harness.task import CeleryTask, StreamRead
from wire.codec import dumps
from wire.narrowing import NarrowedSessionSpec, NarrowedTaskRequest
from wire.store import BusyPolicy

from .auth import tenant
from .events import ENTRY_ID, EVENT_SCHEMA, FIRST_EVENT_ID, sse_event
from .events import task_events as event_stream
from .models import (
    ApprovalAnswer,
    Interaction,
    OnCompletion,
    RunTask,
    StartTask,
    TaskBody,
    TaskResource,
)
from .openapi_docs import problems
from .problems import (
    Issue,
    ProblemError,
    ProblemType,
    Retry,
    invalid,
    not_found_session,
    too_large,
)
from .sessions import ID_PATTERN, SessionIdPath, check_instructions, require_id
from .sse import EventStream
from .state import ApiState, api_state

MAX_WAIT_SECONDS = 600.0
"""The largest ``wait`` the schema accepts; the deployment's ``AHP_API_MAX_WAIT`` caps it."""
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"

router = APIRouter(tags=["tasks"])
log = logging.getLogger(__name__)

Tenant = Annotated[str, Depends(tenant)]
State = Annotated[ApiState, Depends(api_state)]
TaskIdPath = Annotated[
    str,
    Path(pattern=ID_PATTERN, max_length=128, description="A task id (as returned at its start)."),
]
Wait = Annotated[
    float,
    Query(
        ge=0,
        le=MAX_WAIT_SECONDS,
        description="Seconds to wait for the task to settle before answering (capped by the "
        "deployment); 0 answers at once.",
    ),
]


async def _resource(api: ApiState, tenant: str, task_id: str, **extra: Any) -> TaskResource:
    return TaskResource.of(await api.harness.task_info(task_id, tenant=tenant), **extra)


async def _answer(
    api: ApiState, tenant: str, task: CeleryTask, *, replayed: bool | None = None
) -> TaskResource:
    """The resource of a task this process started: once it saw the task settle, from its
    terminal entry (which carries the settled record), else read from the record."""
    view = task.settled_view
    if task.settled and view is not None:
        resource = TaskResource.settled(task, await task.await_outcome(), view, replayed=replayed)
        if resource is not None:
            return resource
    return await _resource(api, tenant, task.id.value, replayed=replayed)


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _wait(
    api: ApiState,
    task: CeleryTask,
    seconds: float,
    request: Request | None = None,
) -> None:
    """Wait up to ``seconds`` for ``task`` to settle; with ``request``, request its
    cancellation if the client disconnects first."""
    seconds = min(seconds, api.settings.max_wait.total_seconds())
    if seconds <= 0:
        return
    outcome = asyncio.ensure_future(task.await_outcome())
    waiters: set[asyncio.Future[Any]] = {outcome}
    gone = None if request is None else asyncio.ensure_future(_disconnected(request))
    if gone is not None:
        waiters.add(gone)
    try:
        done, _ = await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()  # await_outcome is shielded: the task itself goes on
    if gone is not None and gone in done and not outcome.done():
        await task.request_cancellation()


IdempotencyKey = Annotated[
    str | None,
    Header(
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description="Repeat a request with the same key to get the same task (200) "
        "instead of a second one; the same key with another input is refused (422).",
    ),
]
CancelOnDisconnect = Annotated[
    bool,
    Query(description="Cancel the task if the client disconnects before it settles."),
]


_CREATED_AND_EVENTS: dict[str, Any] = {
    "description": "Server-Sent Events: ``task_created`` (id ``0-0``, data: the task "
    "resource), then the task's events as ``GET /v1/tasks/{task_id}/events`` sends "
    "them; each ``id`` resumes the stream there with Last-Event-ID.",
    "content": {"text/event-stream": {"schema": EVENT_SCHEMA}},
}
"""The answer of the routes that start a task and stream its events."""


def _request(body: TaskBody) -> TaskRequest:
    requirements = (
        TaskRequirements()
        if body.output_schema is None
        else TaskRequirements(StructuredOutputRequirement(dumps(body.output_schema)))
    )
    return NarrowedTaskRequest(TextInput(body.input), requirements, body.narrowing())


def _admit_body(api: ApiState, body: TaskBody) -> None:
    """Refuse an input over the limit (413) or a webhook the deployment does not allow."""
    size = len(body.input.encode("utf-8"))
    if size > api.settings.max_input_bytes:
        raise too_large(
            f"an input of {size} bytes exceeds the limit of {api.settings.max_input_bytes}",
            "body.input",
        )
    if body.webhook is not None:
        issues = api.webhooks.issues(body.webhook.url)
        if issues:
            raise invalid(issues)


def _track(api: ApiState, tenant: str, task: CeleryTask, body: TaskBody) -> None:
    """Keep the task's handle for later requests; deliver its webhook once it settles."""
    api.handles.add_task(tenant, task)
    if body.webhook is not None and not task.replayed:
        task_id = task.id.value

        async def payload() -> dict[str, Any]:
            resource = await _resource(api, tenant, task_id)
            return resource.model_dump(mode="json")

        api.webhooks.deliver_when_settled(task, body.webhook.url, payload)


async def _start(
    api: ApiState,
    tenant: str,
    session_id: str,
    body: StartTask,
    idempotency_key: str | None,
) -> CeleryTask:
    """Admit the request and start (or replay, or queue) its task; registers its webhook."""
    require_id("session", session_id)
    _admit_body(api, body)
    session = await api.handles.session(tenant, session_id)
    try:
        task = await session.start_task(
            _request(body),
            idempotency_key=idempotency_key,
            if_busy=BusyPolicy(body.if_busy.value),
        )
    except SessionBlockedError:
        # A cached handle of a session another replica released answers like any
        # released session: not found.
        try:
            info = await api.harness.session_info(session_id, tenant=tenant)
        except UnknownSessionError:
            info = None
        if info is None or (info.closed and not info.persistent):
            api.handles.drop_session(tenant, session_id)
            raise not_found_session(session_id) from None
        raise
    _track(api, tenant, task, body)
    return task


async def _run(api: ApiState, tenant: str, body: RunTask, request: Request) -> CeleryTask:
    """Admit the request, then start it as a run (``harness.runs``): a single-task
    session, or with ``on_completion: keep`` one that stays open for more tasks."""
    if request.headers.get("idempotency-key") is not None:
        raise invalid(
            [
                Issue(
                    path="header.Idempotency-Key",
                    message="a run creates a new session each time and cannot be "
                    "repeated by key; create a session and start the task in it "
                    "(POST /v1/sessions/{session_id}/tasks) to use Idempotency-Key",
                )
            ]
        )
    _admit_body(api, body)
    check_instructions(api, body.instructions)
    spec = NarrowedSessionSpec(instructions=body.instructions, requirements=SessionRequirements())
    keep = body.on_completion is OnCompletion.KEEP
    run = await start_run(api.harness, spec, _request(body), tenant=tenant, keep=keep)
    if keep:
        api.handles.add_session(tenant, run.session)
    _track(api, tenant, run.task, body)
    return run.task


@router.post(
    "/v1/sessions/{session_id}/tasks",
    status_code=status.HTTP_201_CREATED,
    response_model=TaskResource,
    responses={
        200: {"model": TaskResource, "description": "The Idempotency-Key's earlier task."},
        **problems(404, 409, 413),
    },
    summary="Start a task in a session",
)
async def start_task(
    session_id: SessionIdPath,
    body: StartTask,
    tenant: Tenant,
    api: State,
    request: Request,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = 0,
    cancel_on_disconnect: CancelOnDisconnect = False,
) -> TaskResource:
    """Admit the input and enqueue one run on the worker pool.

    On a busy session, ``if_busy=reject`` answers 409 and ``enqueue`` queues the task
    behind the running one (its tasks run strictly in order). With ``webhook``, the settled
    task is POSTed there (signed; see docs/http-api.md). With ``wait``, the answer comes when the
    task settled (or the wait ended); ``cancel_on_disconnect`` then cancels the task if the
    client goes away first. 503 ``start-unconfirmed`` means the task may still run: never
    repeat the request blindly, GET the ``task_id`` it names."""
    task = await _start(api, tenant, session_id, body, idempotency_key)
    await _wait(api, task, wait, request if cancel_on_disconnect else None)
    response.headers["Location"] = f"/v1/tasks/{task.id.value}"
    if task.replayed:
        response.status_code = status.HTTP_200_OK
    return await _answer(api, tenant, task, replayed=task.replayed)


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
    task = await _start(api, tenant, session_id, body, idempotency_key)
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


_RUN_DOC = """

By default (``on_completion: delete``) the run's session (``session_id`` of the task)
takes this one task and ends with it: the step that settles the task releases the
session and deletes its stored context, wherever that step runs, so nothing is left to
DELETE (a DELETE before it settles cancels the task, as for any session). With
``on_completion: keep`` the session stays open for more tasks (``POST
/v1/sessions/{session_id}/tasks``) until ``DELETE /v1/sessions/{session_id}``: a
session and its first task in one request. The task stays readable (``GET
/v1/tasks/{task_id}``, its events) until its retention ends. ``Idempotency-Key`` is
refused (422): to repeat a start safely, create a session and start the task in it."""


@router.post(
    "/v1/tasks",
    status_code=status.HTTP_201_CREATED,
    response_model=TaskResource,
    responses=problems(413),
    summary="Run a task in a session of its own",
    description="Create a session, start the task in it and, with ``wait``, answer once it "
    "settled: the create, run and wait flow in one request (LangGraph's stateless ``POST "
    "/runs/wait``). ``cancel_on_disconnect`` cancels the task if the client goes away "
    "while waiting. 503 ``start-unconfirmed`` means the task may still run: never repeat "
    "the request blindly, GET the ``task_id`` it names." + _RUN_DOC,
)
async def run_task(
    body: RunTask,
    tenant: Tenant,
    api: State,
    request: Request,
    response: Response,
    wait: Wait = 0,
    cancel_on_disconnect: CancelOnDisconnect = False,
) -> TaskResource:
    """Create a session, start the task in it and, with ``wait``, answer once it settled."""
    task = await _run(api, tenant, body, request)
    await _wait(api, task, wait, request if cancel_on_disconnect else None)
    response.headers["Location"] = f"/v1/tasks/{task.id.value}"
    return await _answer(api, tenant, task)


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
    "event id received (``0-0`` for the ``task_created`` event)." + _RUN_DOC,
)
async def run_task_streaming(
    body: RunTask,
    tenant: Tenant,
    api: State,
    request: Request,
    cancel_on_disconnect: CancelOnDisconnect = False,
) -> EventStream:
    """Create a session, start the task in it and answer with its events."""
    task = await _run(api, tenant, body, request)
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
    "/v1/tasks/{task_id}",
    response_model=TaskResource,
    responses=problems(404),
    summary="Get a task's state and outcome",
)
async def get_task(task_id: TaskIdPath, tenant: Tenant, api: State, wait: Wait = 0) -> TaskResource:
    """The task's state, and its outcome once settled. With ``wait``, answer as soon as it
    settles or when the wait ends, whichever is first."""
    require_id("task", task_id)
    info = await api.harness.task_info(task_id, tenant=tenant)
    if info.state.is_terminal or wait <= 0:
        return TaskResource.of(info)
    await _wait(api, await api.handles.task(tenant, task_id), wait)
    return await _resource(api, tenant, task_id)


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


@router.post(
    "/v1/tasks/{task_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=TaskResource,
    responses=problems(404),
    summary="Request a task's cancellation",
)
async def cancel_task(task_id: TaskIdPath, tenant: Tenant, api: State) -> TaskResource:
    """Record the request durably and tell the worker; the task settles ``cancelled`` (or
    ``unresolved`` where termination cannot be confirmed) shortly after. Idempotent; a
    settled task is unchanged."""
    require_id("task", task_id)
    info = await api.harness.task_info(task_id, tenant=tenant)
    if not info.state.is_terminal:
        task = await api.handles.task(tenant, task_id)
        await task.request_cancellation()
    return await _resource(api, tenant, task_id)


@router.post(
    "/v1/tasks/{task_id}/interactions/{interaction_id}",
    response_model=TaskResource,
    responses=problems(404, 409, 413),
    summary="Answer a task's pending approval or question",
)
async def answer_interaction(
    task_id: TaskIdPath,
    interaction_id: Annotated[str, Path(pattern=ID_PATTERN, max_length=128)],
    body: Interaction,
    tenant: Tenant,
    api: State,
) -> TaskResource:
    """Answer one pending approval or question; the task resumes on any worker.

    404 ``unknown-interaction``: the task raised no such interaction. 422: the wrong kind
    of answer, or a decision the approval does not offer (nothing was sent). 409
    ``interaction-closed``: it was answered or cleared already. 503 ``transport-error``:
    not delivered, safe to repeat; 503 ``response-unconfirmed``: the answer may or may
    not have been applied, never repeat it."""
    require_id("task", task_id)
    require_id("interaction", interaction_id)
    task = await api.handles.task(tenant, task_id)
    answer: InteractionResponse
    if isinstance(body.response, ApprovalAnswer):
        answer = ApprovalResponse(ApprovalDecision(body.response.decision))
    else:
        answer = AnswerResponse(body.response.text)
    try:
        await task.respond(InteractionId(interaction_id), answer)
    except UnknownInteractionError:
        raise ProblemError(
            ProblemType.UNKNOWN_INTERACTION,
            404,
            f"task {task_id} has no pending interaction {interaction_id}",
            task_id=task_id,
        ) from None
    except InteractionClosedError as error:
        raise ProblemError(
            ProblemType.INTERACTION_CLOSED, 409, str(error), task_id=task_id
        ) from None
    except InteractionResponseUnconfirmedError as error:
        raise ProblemError(
            ProblemType.RESPONSE_UNCONFIRMED,
            503,
            f"{error}. Do not repeat the request; GET /v1/tasks/{task_id} tells what happened.",
            task_id=task_id,
            retry=Retry.UNSAFE,
        ) from None
    except ValueError as error:
        # The wrong kind of response, or a decision the request does not offer.
        raise invalid([Issue(path="body.response", message=str(error))]) from None
    return await _resource(api, tenant, task_id)


__all__ = ["router"]
