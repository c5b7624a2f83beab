"""What every task route shares: its parameters, and admitting and starting a task.

A start is admitted here (the input's size, the webhook's host) before the harness
writes anything; the started task's handle is kept for later requests, with its webhook.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

from agent_harness_protocol import (
    SessionBlockedError,
    SessionRequirements,
    StructuredOutputRequirement,
    TaskRequest,
    TaskRequirements,
    TextInput,
)
from fastapi import Depends, Header, Path, Query, Request

from harness.errors import (
    UnknownSessionError,
)
from harness.runs import start_run
from harness.task import CeleryTask
from wire import keys
from wire.codec import dumps
from wire.narrowing import NarrowedSessionSpec, NarrowedTaskRequest
from wire.store import BusyPolicy

from .auth import tenant
from .models import TaskResource
from .problems import (
    Issue,
    invalid,
    not_found_session,
    too_large,
)
from .request_bodies import OnCompletion, RunTask, StartTask, TaskBody
from .sessions import ID_PATTERN, check_instructions, require_id
from .state import ApiState, api_state

MAX_WAIT_SECONDS = 600.0
"""The largest ``wait`` the schema accepts; the deployment's ``AHP_API_MAX_WAIT`` caps it."""
IDEMPOTENCY_KEY_PATTERN = f"^{keys.IDEMPOTENCY_KEY_PATTERN}$"

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


async def task_resource(api: ApiState, tenant: str, task_id: str, **extra: Any) -> TaskResource:
    return TaskResource.of(await api.harness.task_info(task_id, tenant=tenant), **extra)


async def started_resource(
    api: ApiState, tenant: str, task: CeleryTask, *, replayed: bool | None = None
) -> TaskResource:
    """The resource of a task this process started: once it saw the task settle, from its
    terminal entry (which carries the settled record), else read from the record."""
    view = task.settled_view
    if task.settled and view is not None:
        resource = TaskResource.settled(task, await task.await_outcome(), view, replayed=replayed)
        if resource is not None:
            return resource
    return await task_resource(api, tenant, task.id.value, replayed=replayed)


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def wait_settled(
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
            resource = await task_resource(api, tenant, task_id)
            return resource.model_dump(mode="json")

        api.webhooks.deliver_when_settled(task, body.webhook.url, payload)


async def start_in_session(
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
            limits=api.settings.limits_of(tenant),
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


async def start_as_run(api: ApiState, tenant: str, body: RunTask, request: Request) -> CeleryTask:
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
    run = await start_run(
        api.harness,
        spec,
        _request(body),
        tenant=tenant,
        keep=keep,
        limits=api.settings.limits_of(tenant),
    )
    if keep:
        api.handles.add_session(tenant, run.session)
    _track(api, tenant, run.task, body)
    return run.task


RUN_DOC = """

By default (``on_completion: delete``) the run's session (``session_id`` of the task)
takes this one task and ends with it: the step that settles the task releases the
session and deletes its stored context, wherever that step runs, so nothing is left to
DELETE (a DELETE before it settles cancels the task, as for any session). With
``on_completion: keep`` the session stays open for more tasks (``POST
/v1/sessions/{session_id}/tasks``) until ``DELETE /v1/sessions/{session_id}``: a
session and its first task in one request. The task stays readable (``GET
/v1/tasks/{task_id}``, its events) until its retention ends. ``Idempotency-Key`` is
refused (422): to repeat a start safely, create a session and start the task in it."""
