"""RFC 9457 problem details: the one shape of every error the API answers with.

Every refusal is an ``application/problem+json`` body with a stable ``type`` URI (one per
kind of problem, listed in :class:`ProblemType`), a ``title`` that names the kind, the HTTP
``status``, and a ``detail`` for this occurrence. Extension members carry what a caller
acts on: ``issues`` (every reason a request was refused, by path), ``session_id`` /
``task_id`` (the ids involved), and ``retry`` (whether repeating the request is safe).

The mapping from the harness's errors to problems lives here and only here
(:func:`problem_for`). Details never carry a stack trace, a token or a Redis address.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from enum import StrEnum
from http import HTTPStatus

from agent_harness_protocol import (
    HarnessTransportError,
    IncompatibleRequirementError,
    SessionBlockedError,
    TaskStartUnconfirmedError,
)
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError
from starlette.responses import JSONResponse

from harness.errors import (
    IdempotencyKeyReusedError,
    SessionBusyError,
    TenantQueueFullError,
    TenantRateLimitedError,
    UnknownSessionError,
    UnknownTaskError,
)

PROBLEM_MEDIA_TYPE = "application/problem+json"
_BASE = "https://agent-harness-protocol-celery.invalid/problems/"


log = logging.getLogger(__name__)


class ProblemType(StrEnum):
    """Every kind of problem, by its slug (``type`` is the base URI plus the slug)."""

    INVALID_REQUEST = "invalid-request"
    UNAUTHORIZED = "unauthorized"
    NOT_FOUND = "not-found"
    METHOD_NOT_ALLOWED = "method-not-allowed"
    NOT_ACCEPTABLE = "not-acceptable"
    UNSUPPORTED_MEDIA_TYPE = "unsupported-media-type"
    PAYLOAD_TOO_LARGE = "payload-too-large"
    INCOMPATIBLE_REQUIREMENTS = "incompatible-requirements"
    IDEMPOTENCY_KEY_REUSED = "idempotency-key-reused"
    SESSION_BUSY = "session-busy"
    SESSION_BLOCKED = "session-blocked"
    SESSION_NOT_PERSISTENT = "session-not-persistent"
    SESSION_OPEN = "session-open"
    UNKNOWN_INTERACTION = "unknown-interaction"
    INTERACTION_CLOSED = "interaction-closed"
    CONFLICT = "conflict"
    RESPONSE_UNCONFIRMED = "response-unconfirmed"
    TRANSPORT_ERROR = "transport-error"
    START_UNCONFIRMED = "start-unconfirmed"
    UNAVAILABLE = "unavailable"
    TENANT_RATE_LIMITED = "tenant-rate-limited"
    TENANT_QUEUE_FULL = "tenant-queue-full"
    INTERNAL = "internal-error"

    @property
    def uri(self) -> str:
        return _BASE + self.value


class Retry(StrEnum):
    """What repeating a request that failed with 503 would do."""

    SAFE = "safe"
    """Nothing was carried out: send the same request again (after ``Retry-After``)."""
    UNSAFE = "unsafe"
    """The work may run: do not repeat the request; look at ``task_id`` instead."""


class Issue(BaseModel):
    """One reason a request was refused."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(description="Where in the request (``body.input``, ``query.wait``, ...).")
    message: str
    kind: str | None = Field(
        default=None,
        description="``unsupported`` or ``unconfirmed`` for requirement issues; the "
        "validation error type for malformed requests.",
    )


class Problem(BaseModel):
    """An RFC 9457 problem details object."""

    model_config = ConfigDict(frozen=True)

    type: str = Field(description="A URI naming the kind of problem.")
    title: str = Field(description="A short summary of the kind of problem.")
    status: int = Field(ge=400, le=599)
    detail: str = Field(description="What went wrong in this occurrence.")
    instance: str | None = Field(default=None, description="The request path.")
    issues: list[Issue] | None = None
    session_id: str | None = None
    task_id: str | None = None
    retry: Retry | None = None


class ProblemError(Exception):
    """Raised anywhere in a request to answer with a problem."""

    def __init__(
        self,
        kind: ProblemType,
        status: int,
        detail: str,
        *,
        issues: Iterable[Issue] | None = None,
        session_id: str | None = None,
        task_id: str | None = None,
        retry: Retry | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.kind = kind
        self.status = status
        self.detail = detail
        self.issues = None if issues is None else list(issues)
        self.session_id = session_id
        self.task_id = task_id
        self.retry = retry
        self.headers = dict(headers or {})

    def problem(self, instance: str | None = None) -> Problem:
        return Problem(
            type=self.kind.uri,
            title=_TITLES[self.kind],
            status=self.status,
            detail=self.detail,
            instance=instance,
            issues=self.issues,
            session_id=self.session_id,
            task_id=self.task_id,
            retry=self.retry,
        )

    def response(self, instance: str | None = None) -> JSONResponse:
        body = self.problem(instance).model_dump(mode="json", exclude_none=True)
        return JSONResponse(
            body, status_code=self.status, headers=self.headers, media_type=PROBLEM_MEDIA_TYPE
        )


_TITLES: dict[ProblemType, str] = {
    ProblemType.INVALID_REQUEST: "The request is not valid",
    ProblemType.UNAUTHORIZED: "A valid bearer token is required",
    ProblemType.NOT_FOUND: "Not found",
    ProblemType.METHOD_NOT_ALLOWED: "Method not allowed",
    ProblemType.NOT_ACCEPTABLE: "Not acceptable",
    ProblemType.UNSUPPORTED_MEDIA_TYPE: "Unsupported media type",
    ProblemType.PAYLOAD_TOO_LARGE: "The request is too large",
    ProblemType.INCOMPATIBLE_REQUIREMENTS: "The requirements cannot be served",
    ProblemType.IDEMPOTENCY_KEY_REUSED: "The idempotency key was used for another request",
    ProblemType.SESSION_BUSY: "The session is running another task",
    ProblemType.SESSION_BLOCKED: "The session cannot start tasks",
    ProblemType.SESSION_NOT_PERSISTENT: "The session is not persistent",
    ProblemType.SESSION_OPEN: "The session is open",
    ProblemType.UNKNOWN_INTERACTION: "No such pending interaction",
    ProblemType.INTERACTION_CLOSED: "The interaction is no longer pending",
    ProblemType.CONFLICT: "The request conflicts with the thread's state",
    ProblemType.RESPONSE_UNCONFIRMED: "Whether the response was applied is unknown",
    ProblemType.TRANSPORT_ERROR: "The harness could not reach its store or broker",
    ProblemType.START_UNCONFIRMED: "The task's start is unconfirmed",
    ProblemType.UNAVAILABLE: "The service is not available",
    ProblemType.TENANT_RATE_LIMITED: "The tenant is starting tasks faster than its limit",
    ProblemType.TENANT_QUEUE_FULL: "The tenant has its limit of tasks waiting",
    ProblemType.INTERNAL: "Internal error",
}


def not_found_session(session_id: str) -> ProblemError:
    """Unknown, released and another tenant's sessions all answer exactly this."""
    return ProblemError(
        ProblemType.NOT_FOUND, 404, f"no session {session_id} exists", session_id=session_id
    )


def not_found_task(task_id: str) -> ProblemError:
    """Unknown, expired and another tenant's tasks all answer exactly this."""
    return ProblemError(ProblemType.NOT_FOUND, 404, f"no task {task_id} exists", task_id=task_id)


def too_large(detail: str, path: str | None = None) -> ProblemError:
    issues = None if path is None else [Issue(path=path, message=detail)]
    return ProblemError(ProblemType.PAYLOAD_TOO_LARGE, 413, detail, issues=issues)


def invalid(issues: Iterable[Issue], detail: str | None = None) -> ProblemError:
    listed = list(issues)
    text = detail or "; ".join(f"{issue.path}: {issue.message}" for issue in listed)
    return ProblemError(ProblemType.INVALID_REQUEST, 422, text, issues=listed)


def problem_for(error: Exception) -> ProblemError | None:
    """The problem a harness error means, or ``None`` for an error that is not one."""
    if isinstance(error, ProblemError):
        return error
    if isinstance(error, UnknownSessionError):
        return not_found_session(error.session_id)
    if isinstance(error, UnknownTaskError):
        return not_found_task(error.task_id)
    if isinstance(error, IdempotencyKeyReusedError):
        return ProblemError(
            ProblemType.IDEMPOTENCY_KEY_REUSED,
            422,
            "this Idempotency-Key started a task with a different request; nothing was "
            "started (use a new key for a new request)",
            task_id=error.task_id,
            issues=[Issue(path="header.Idempotency-Key", message="used for another request")],
        )
    if isinstance(error, TenantRateLimitedError):
        assert error.retry_after is not None
        return ProblemError(
            ProblemType.TENANT_RATE_LIMITED,
            429,
            f"{error}; nothing was started",
            retry=Retry.SAFE,
            headers={"Retry-After": str(max(1, math.ceil(error.retry_after.total_seconds())))},
        )
    if isinstance(error, TenantQueueFullError):
        return ProblemError(
            ProblemType.TENANT_QUEUE_FULL,
            429,
            f"{error}; nothing was started (start again once some of them have started)",
            retry=Retry.SAFE,
        )
    if isinstance(error, SessionBusyError):
        return ProblemError(
            ProblemType.SESSION_BUSY,
            409,
            f"session {error.session_id} is running task {error.task_id}; wait for it, "
            "cancel it, or start with if_busy=enqueue",
            session_id=error.session_id,
            task_id=error.task_id,
        )
    if isinstance(error, SessionBlockedError):
        return ProblemError(
            ProblemType.SESSION_BLOCKED,
            409,
            str(error),
            session_id=error.session_id.value,
        )
    if isinstance(error, TaskStartUnconfirmedError):
        task_id = error.reference.request_id
        return ProblemError(
            ProblemType.START_UNCONFIRMED,
            503,
            f"task {task_id} may or may not run: its delivery to the broker is unknown. "
            f"Do not repeat the request; GET /v1/tasks/{task_id} tells its fate.",
            session_id=error.reference.session_id.value,
            task_id=task_id,
            retry=Retry.UNSAFE,
        )
    if isinstance(error, HarnessTransportError | RedisError):
        # A Redis error a route let through (the LangGraph dialect's own records): every
        # write that could leave work running is answered by its route instead.
        return ProblemError(
            ProblemType.TRANSPORT_ERROR,
            503,
            "the harness could not reach Redis or the broker; the request was not carried "
            "out and is safe to repeat",
            retry=Retry.SAFE,
            headers={"Retry-After": "1"},
        )
    if isinstance(error, IncompatibleRequirementError):
        issues = [
            Issue(path=issue.path, message=issue.message, kind=issue.kind.value)
            for issue in error.issues
        ]
        return ProblemError(
            ProblemType.INCOMPATIBLE_REQUIREMENTS,
            422,
            "; ".join(f"{issue.path}: {issue.message}" for issue in issues),
            issues=issues,
        )
    return None


def problem_response(error: Exception, method: str, path: str) -> tuple[JSONResponse, bool]:
    """The answer to an error raised while serving ``method path``, and whether it was
    unexpected (logged here and answered 500, with no detail)."""
    mapped = problem_for(error)
    if mapped is not None:
        return mapped.response(path), False
    log.error("unexpected %s on %s %s", type(error).__name__, method, path)
    internal = ProblemError(ProblemType.INTERNAL, 500, "the request could not be completed")
    return internal.response(path), True


def status_problem(status: int, detail: str | None = None) -> ProblemError:
    """The problem of a plain HTTP status raised by the framework (404 route, 405 ...)."""
    kinds = {
        400: ProblemType.INVALID_REQUEST,
        401: ProblemType.UNAUTHORIZED,
        404: ProblemType.NOT_FOUND,
        405: ProblemType.METHOD_NOT_ALLOWED,
        406: ProblemType.NOT_ACCEPTABLE,
        413: ProblemType.PAYLOAD_TOO_LARGE,
        415: ProblemType.UNSUPPORTED_MEDIA_TYPE,
        422: ProblemType.INVALID_REQUEST,
        503: ProblemType.UNAVAILABLE,
    }
    kind = kinds.get(status, ProblemType.INVALID_REQUEST if status < 500 else ProblemType.INTERNAL)
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    return ProblemError(kind, status, detail or phrase)


__all__ = [
    "PROBLEM_MEDIA_TYPE",
    "Issue",
    "Problem",
    "ProblemError",
    "ProblemType",
    "Retry",
    "invalid",
    "not_found_session",
    "not_found_task",
    "problem_for",
    "problem_response",
    "status_problem",
    "too_large",
]
