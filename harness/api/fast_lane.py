"""The hot routes' well-formed requests, served without FastAPI's per-request machinery.

Creating a session and starting a task (with or without its own session, answered with
the task, its outcome or its events) are the requests every caller makes. FastAPI's
request handling (routing, dependency resolution, body parsing and response validation)
costs about 130 us of CPU per such request in process on the benchmark machine, which
became about 1 ms of latency end to end (``bench/http_vs_harness.py``, the one-request
runs with and without this lane).

A lane route sits in front of its FastAPI route, with the same path template. It serves a
request itself only when every part is in the plain form it fully checks: a known bearer
token, a JSON body that parses and validates as the route's body model, the query
parameters in their simple spelling, a valid id in the path and a valid
``Idempotency-Key``. Then it calls the route's own endpoint function with those values
and answers exactly as FastAPI would (the same status, headers and JSON bytes, which
``tests/test_api_fast_lane.py`` compares). Anything else, including every malformed or
unauthenticated request, goes to the FastAPI route unchanged (its body replayed), so every
refusal keeps FastAPI's answer and the OpenAPI document describes both. Errors raised by
an endpoint reach the app's exception handlers as they do from FastAPI's routes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from . import sessions, tasks
from .auth import Tenants
from .limits import replaying
from .models import CreateSession, RunTask, StartTask
from .state import ApiState

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")
_WAIT = re.compile(r"[0-9]{1,3}(\.[0-9]{1,6})?")
_BOOLEANS = {"true": True, "false": False}
_JSON = {"application/json", "application/json; charset=utf-8"}


class _Fallback(Exception):
    """The request is not in the plain form this lane checks: FastAPI serves it."""


@dataclass(frozen=True, slots=True)
class Plain:
    """A request in the plain form, with what the endpoint needs."""

    tenant: str
    api: ApiState
    body: Any
    query: Mapping[str, str]
    request: Request


Endpoint = Callable[[Plain, Response], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class LaneRoute:
    path: str
    name: str
    """The name of the FastAPI route it stands in front of (its endpoint's name)."""
    body: type[BaseModel]
    query: frozenset[str]
    idempotency_key: bool
    """Whether the route takes ``Idempotency-Key`` (else the header means FastAPI serves)."""
    call: Endpoint


def _wait(query: Mapping[str, str]) -> float:
    value = query.get("wait")
    if value is None:
        return 0.0
    if _WAIT.fullmatch(value) is None or float(value) > tasks.MAX_WAIT_SECONDS:
        raise _Fallback
    return float(value)


def _flag(query: Mapping[str, str], name: str) -> bool:
    value = query.get(name)
    if value is None:
        return False
    if value not in _BOOLEANS:
        raise _Fallback
    return _BOOLEANS[value]


def _session_id(plain: Plain) -> str:
    value = str(plain.request.path_params.get("session_id", ""))
    if _ID.fullmatch(value) is None:
        raise _Fallback
    return value


def _idempotency_key(plain: Plain) -> str | None:
    return plain.request.headers.get("idempotency-key")


async def _create_session(plain: Plain, response: Response) -> Any:
    return await sessions.create_session(plain.body, plain.tenant, plain.api, response)


async def _start_task(plain: Plain, response: Response) -> Any:
    return await tasks.start_task(
        _session_id(plain),
        plain.body,
        plain.tenant,
        plain.api,
        plain.request,
        response,
        idempotency_key=_idempotency_key(plain),
        wait=_wait(plain.query),
        cancel_on_disconnect=_flag(plain.query, "cancel_on_disconnect"),
    )


async def _start_task_streaming(plain: Plain, response: Response) -> Any:
    return await tasks.start_task_streaming(
        _session_id(plain),
        plain.body,
        plain.tenant,
        plain.api,
        idempotency_key=_idempotency_key(plain),
        cancel_on_disconnect=_flag(plain.query, "cancel_on_disconnect"),
    )


async def _run_task(plain: Plain, response: Response) -> Any:
    return await tasks.run_task(
        plain.body,
        plain.tenant,
        plain.api,
        plain.request,
        response,
        wait=_wait(plain.query),
        cancel_on_disconnect=_flag(plain.query, "cancel_on_disconnect"),
    )


async def _run_task_streaming(plain: Plain, response: Response) -> Any:
    return await tasks.run_task_streaming(
        plain.body,
        plain.tenant,
        plain.api,
        plain.request,
        cancel_on_disconnect=_flag(plain.query, "cancel_on_disconnect"),
    )


_WAITING = frozenset({"wait", "cancel_on_disconnect"})
_STREAMING = frozenset({"cancel_on_disconnect"})
LANE: tuple[LaneRoute, ...] = (
    LaneRoute("/v1/sessions", "create_session", CreateSession, frozenset(), False, _create_session),
    LaneRoute(
        "/v1/sessions/{session_id}/tasks", "start_task", StartTask, _WAITING, True, _start_task
    ),
    LaneRoute(
        "/v1/sessions/{session_id}/tasks/stream",
        "start_task_streaming",
        StartTask,
        _STREAMING,
        True,
        _start_task_streaming,
    ),
    LaneRoute("/v1/tasks", "run_task", RunTask, _WAITING, False, _run_task),
    LaneRoute(
        "/v1/tasks/stream", "run_task_streaming", RunTask, _STREAMING, False, _run_task_streaming
    ),
)


class LaneApp:
    """The ASGI app of one lane route (a Starlette ``Route`` endpoint)."""

    def __init__(self, lane: LaneRoute, route: APIRoute) -> None:
        self._lane = lane
        self._route = route
        self.path = lane.path
        """The route template: it labels the request's metrics, as FastAPI's route does."""
        self.served = 0
        """Requests this lane answered itself (the rest went to FastAPI)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self
        body = await _read_body(receive)
        replay = replaying(body, receive)
        try:
            plain = self._plain(scope, replay, body)
            response = Response()
            del response.headers["content-length"]
            response.status_code = None  # type: ignore[assignment]
            result = await self._lane.call(plain, response)
        except _Fallback:
            await self._route.handle(scope, replay, send)
            return
        self.served += 1
        answer = result if isinstance(result, Response) else self._json(result, response)
        await answer(scope, replay, send)

    def _plain(self, scope: Scope, receive: Receive, body: bytes) -> Plain:
        request = Request(scope, receive)
        headers = request.headers
        if headers.get("content-type") not in _JSON:
            raise _Fallback
        key = headers.get("idempotency-key")
        if key is not None and (
            not self._lane.idempotency_key or _IDEMPOTENCY_KEY.fullmatch(key) is None
        ):
            raise _Fallback
        tenant = _tenant(headers.get("authorization"), request.app.state.tenants)
        query = _query(scope, self._lane.query)
        try:
            parsed = self._lane.body.model_validate(json.loads(body))
        except (ValueError, ValidationError, RecursionError):
            # Not JSON, not valid, or nested too deep to parse (FastAPI answers 422).
            raise _Fallback from None
        api: ApiState = request.app.state.api
        return Plain(tenant, api, parsed, query, request)

    def _json(self, result: Any, response: Response) -> Response:
        """The answer FastAPI gives for a ``response_model`` route's return value."""
        model = self._route.response_model
        if not (isinstance(result, BaseModel) and isinstance(model, type)) or not isinstance(
            result, model
        ):
            raise TypeError(f"{self._lane.name} returned {type(result).__name__}, not {model}")
        status = response.status_code or self._route.status_code or 200
        answer = Response(
            result.model_dump_json(by_alias=True), status_code=status, media_type="application/json"
        )
        answer.headers.raw.extend(response.headers.raw)
        return answer


def _tenant(authorization: str | None, tenants: Tenants) -> str:
    if authorization is None or not authorization.startswith("Bearer "):
        raise _Fallback
    token = authorization[len("Bearer ") :]
    if not token or " " in token:
        raise _Fallback
    tenant = tenants.tenant_of(token)
    if tenant is None:
        raise _Fallback
    return tenant


def _query(scope: Scope, known: frozenset[str]) -> dict[str, str]:
    """The route's query parameters, each given once (repeated or unknown ones: FastAPI)."""
    pairs = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    query: dict[str, str] = {}
    for name, value in pairs:
        if name not in known or name in query:
            raise _Fallback
        query[name] = value
    return query


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def install(app: FastAPI) -> dict[str, LaneApp]:
    """Put the lane's routes in front of their FastAPI routes; returns them by name."""
    routes = {route.name: route for route in _api_routes()}
    lanes: dict[str, LaneApp] = {}
    front: list[Route] = []
    for lane in LANE:
        route = routes[lane.name]
        lane_app = LaneApp(lane, route)
        lanes[lane.name] = lane_app
        front.append(Route(lane.path, lane_app, methods=["POST"], name=f"{lane.name}_lane"))
    app.router.routes[:0] = front
    return lanes


def _api_routes() -> list[APIRoute]:
    found: list[APIRoute] = []
    for router in (sessions.router, tasks.router):
        found.extend(route for route in router.routes if isinstance(route, APIRoute))
    return found


__all__ = ["LANE", "LaneApp", "install"]
