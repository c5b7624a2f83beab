"""The app factory: ``uvicorn --factory harness.api.app:create_app``.

One app holds one ``CeleryHarness`` for its lifetime (given, or built from the
environment's ``AHP_*`` settings and closed with the app) and answers every error as an
RFC 9457 problem (``harness.api.problems``). Layers, outermost first: FastAPI's stack
with request counting, then the body limit (so a refused body is counted and never
parsed).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agent_harness_protocol import (
    HarnessTransportError,
    IncompatibleRequirementError,
    SessionBlockedError,
    TaskStartUnconfirmedError,
)
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from redis.asyncio import Redis
from starlette.exceptions import HTTPException as StarletteHTTPException

from harness.connections import caller_pool
from harness.errors import CeleryHarnessError
from harness.harness import CeleryHarness
from harness.redis_errors import reported
from wire.dead_letters import dead_letter_counts
from wire.keys import Keys

from . import dead_letters, langgraph, sessions, task_streams, tasks
from .auth import Tenants, unauthorized
from .handles import Handles
from .limits import BodyLimit
from .metrics import CONTENT_TYPE, CountRequests, RequestMetrics, render
from .models import Health
from .problems import (
    PROBLEM_MEDIA_TYPE,
    Issue,
    Problem,
    ProblemError,
    ProblemType,
    invalid,
    problem_response,
    status_problem,
)
from .settings import ApiSettings
from .state import ApiState, api_state
from .tracing import trace_requests
from .webhooks import Webhooks

log = logging.getLogger(__name__)

_EVENTS_POOL_SIZE = 4
"""Pooled connections of the app's own reads of event streams and its readiness probe."""

_DESCRIPTION = """\
The thin HTTP submit API of the distributed Agent Harness Protocol harness: sessions,
tasks run by the Celery worker pool, their events as resumable Server-Sent Events.

Authenticate with `Authorization: Bearer <token>`; each token names a tenant, and a tenant
sees only its own sessions and tasks. Every error is an RFC 9457 problem
(`application/problem+json`).
"""


def create_app(
    settings: ApiSettings | None = None,
    harness: CeleryHarness | None = None,
) -> FastAPI:
    """Build the API. Without ``harness``, one is built from the environment when the app
    starts and closed when it stops; a given harness stays the caller's to close."""
    api_settings = settings if settings is not None else ApiSettings()
    tenants = Tenants(api_settings.tenant_tokens())
    if not len(tenants):
        log.warning("no API tokens are configured (AHP_API_TOKENS): every /v1 request gets 401")
    requests = RequestMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = harness is None
        used = harness if harness is not None else CeleryHarness()
        core = used.settings
        # Event streams are followed by the harness's stream reader; this pool serves
        # their other reads (backlogs, the last read after a settle) and the readiness
        # probe: none of them blocks.
        events_redis = Redis(
            connection_pool=caller_pool(core.redis_url, _EVENTS_POOL_SIZE, decode_responses=True)
        )
        webhooks = Webhooks(api_settings)
        app.state.api = ApiState(
            settings=api_settings,
            core=core,
            harness=used,
            handles=Handles(used, api_settings.handle_cache),
            webhooks=webhooks,
            tenants=tenants,
            requests=requests,
            keys=Keys(core.namespace),
            events_redis=events_redis,
        )
        try:
            yield
        finally:
            await webhooks.aclose()
            await events_redis.aclose()
            await events_redis.connection_pool.disconnect()
            if owned:
                # Sessions stay open for other replicas (or this one, restarted).
                await used.detach()

    app = FastAPI(
        title="agent-harness-protocol-celery",
        version="1",
        description=_DESCRIPTION,
        lifespan=lifespan,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
        # Operation ids are the handlers' names (createSession-like, stable for clients).
        generate_unique_id_function=lambda route: route.name,
    )
    app.state.tenants = tenants
    app.include_router(sessions.router)
    app.include_router(tasks.router)
    app.include_router(task_streams.router)
    app.include_router(dead_letters.router)
    app.include_router(langgraph.router)
    _install_handlers(app)
    _add_operational_routes(app, api_settings, requests)
    app.add_middleware(BodyLimit, max_bytes=api_settings.max_body_bytes)
    app.add_middleware(CountRequests, metrics=requests)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    trace_requests(app, own_process=harness is None and settings is None)
    return app


def _add_operational_routes(app: FastAPI, settings: ApiSettings, requests: RequestMetrics) -> None:
    @app.get("/healthz", response_model=Health, tags=["operations"], summary="Liveness")
    async def healthz() -> Health:
        """The process serves requests (no dependency is checked)."""
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=Health,
        tags=["operations"],
        summary="Readiness",
        responses={503: {"model": Problem, "description": "Redis cannot be reached."}},
    )
    async def readyz(api: ApiState = Depends(api_state)) -> Health:  # noqa: B008
        """Redis answers."""
        try:
            await api.events_redis.ping()
        except Exception:
            raise ProblemError(
                ProblemType.UNAVAILABLE,
                503,
                "Redis cannot be reached",
                headers={"Retry-After": "1"},
            ) from None
        return Health(status="ok")

    @app.get(
        "/metrics",
        tags=["operations"],
        summary="Prometheus metrics",
        response_class=Response,
        responses={
            200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}},
            401: {"model": Problem, "description": "The metrics token is required."},
            503: {"model": Problem, "description": "Redis cannot be reached."},
        },
    )
    async def metrics(request: Request, api: ApiState = Depends(api_state)) -> Response:  # noqa: B008
        """Queue depth, tasks by state, settled totals by outcome, task duration and
        time-to-start histograms, dead letters by kind (pool-wide, from Redis), and this
        process's request counters."""
        if settings.metrics_token is not None:
            expected = f"Bearer {settings.metrics_token.get_secret_value()}"
            if not _same(request.headers.get("authorization", ""), expected):
                raise unauthorized("the metrics token is required")
        figures = await api.harness.task_metrics()
        with reported("the dead-letter counts could not be read"):
            letters = await dead_letter_counts(api.events_redis, api.keys)
        return Response(render(figures, requests, letters), media_type=CONTENT_TYPE)


def _same(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode("utf-8", "replace"), expected.encode())


def _install_handlers(app: FastAPI) -> None:
    async def problem(request: Request, error: Exception) -> Response:
        response, _ = problem_response(error, request.method, request.url.path)
        return response

    async def validation(request: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        issues = [
            Issue(
                path=".".join(str(part) for part in item.get("loc", ())),
                message=str(item.get("msg", "invalid")),
                kind=str(item.get("type", "")) or None,
            )
            for item in error.errors()
        ]
        return invalid(issues).response(request.url.path)

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, StarletteHTTPException)
        if error.status_code == 400:
            # FastAPI's "error parsing the body" (not JSON, not text): a malformed request
            # like any other, with its issue listed.
            return invalid(
                [Issue(path="body", message="the body is not a JSON document")]
            ).response(request.url.path)
        mapped = status_problem(error.status_code, _public_detail(error))
        if error.headers:
            mapped.headers.update(error.headers)
        return mapped.response(request.url.path)

    app.add_exception_handler(ProblemError, problem)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http_error)
    for kind in (
        CeleryHarnessError,
        HarnessTransportError,
        TaskStartUnconfirmedError,
        SessionBlockedError,
        IncompatibleRequirementError,
    ):
        app.add_exception_handler(kind, problem)
    app.add_exception_handler(Exception, problem)


def _public_detail(error: StarletteHTTPException) -> str | None:
    detail = error.detail
    return detail if isinstance(detail, str) and len(detail) < 200 else None


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated schema, with every 4xx/5xx documented as ``application/problem+json``
    (FastAPI's default 422 body replaced by the problem it really is)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    problem_ref = {"$ref": "#/components/schemas/Problem"}
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            responses = operation.get("responses", {})
            for code, response in responses.items():
                if code.isdigit() and int(code) >= 400:
                    response["content"] = {PROBLEM_MEDIA_TYPE: {"schema": problem_ref}}
                    if code == "422":
                        response["description"] = (
                            "The request is not valid (``issues`` lists why), or its "
                            "requirements cannot be served."
                        )
    components = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    app.openapi_schema = schema
    return schema


__all__ = ["create_app"]
