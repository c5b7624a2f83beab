"""Task routes answered with JSON: start (in a session or as a run), read with an optional
wait, cancel, answer an interaction. The streaming routes are ``harness.api.task_streams``."""

from __future__ import annotations

from typing import Annotated

from agent_harness_protocol import (
    AnswerResponse,
    ApprovalDecision,
    ApprovalResponse,
    InteractionId,
    InteractionResponse,
    InteractionResponseUnconfirmedError,
)
from fastapi import APIRouter, Path, Request, Response, status

from harness.errors import (
    InteractionClosedError,
    UnknownInteractionError,
)

from .models import TaskResource
from .openapi_docs import problems
from .problems import (
    Issue,
    ProblemError,
    ProblemType,
    Retry,
    invalid,
)
from .request_bodies import ApprovalAnswer, Interaction, RunTask, StartTask
from .sessions import ID_PATTERN, SessionIdPath, require_id
from .task_admission import (
    RUN_DOC,
    CancelOnDisconnect,
    IdempotencyKey,
    State,
    TaskIdPath,
    Tenant,
    Wait,
    start_as_run,
    start_in_session,
    started_resource,
    task_resource,
    wait_settled,
)

router = APIRouter(tags=["tasks"])


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
    task = await start_in_session(api, tenant, session_id, body, idempotency_key)
    await wait_settled(api, task, wait, request if cancel_on_disconnect else None)
    response.headers["Location"] = f"/v1/tasks/{task.id.value}"
    if task.replayed:
        response.status_code = status.HTTP_200_OK
    return await started_resource(api, tenant, task, replayed=task.replayed)


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
    "the request blindly, GET the ``task_id`` it names." + RUN_DOC,
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
    task = await start_as_run(api, tenant, body, request)
    await wait_settled(api, task, wait, request if cancel_on_disconnect else None)
    response.headers["Location"] = f"/v1/tasks/{task.id.value}"
    return await started_resource(api, tenant, task)


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
    await wait_settled(api, await api.handles.task(tenant, task_id), wait)
    return await task_resource(api, tenant, task_id)


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
    return await task_resource(api, tenant, task_id)


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
    return await task_resource(api, tenant, task_id)


__all__ = ["router"]
