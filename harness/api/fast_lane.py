"""The hot routes' well-formed requests, served without FastAPI's per-request machinery.

Creating a session and starting a task (with or without its own session, answered with
the task, its outcome or its events) are the requests every caller makes. FastAPI's
request handling (routing, dependency resolution, body parsing and response validation)
is a large share of what such a request costs the API in CPU and in latency
(``bench/http_vs_harness.py`` measures what the API adds; its results are in
``docs/benchmarks.md``).

``FrontDoor`` is the app's outermost ASGI layer. A POST to one of the lane's path
templates, with a ``Content-Length`` within the body limit, is served by that route's lane
when every part is in the plain form it fully checks: a known bearer token, a JSON body
that parses and validates as the route's body model, the query parameters in their simple
spelling, a valid id in the path and a valid ``Idempotency-Key``. The lane then calls the
route's own endpoint function with those values and answers exactly as FastAPI would (the
same status, headers and JSON bytes, which ``tests/test_api_fast_lane.py`` compares),
counted in the request metrics as the app counts every request. Anything else, including
every malformed, oversized or unauthenticated request, goes to the app unchanged (its body
replayed), so every refusal keeps the app's answer and the OpenAPI document describes
both. An error raised by an endpoint is answered as the app's exception handlers answer
it (``problem_response``).

Standing outside the app's middleware stack and router (its error, telemetry, counting
and body-limit layers and its route matching) saves about 50 us of CPU per request in
process, 60 % of a lane request's cost there.
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
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from . import sessions, tasks
from .auth import Tenants
from .limits import declared_length, replaying
from .metrics import RequestMetrics
from .models import CreateSession, RunTask, StartTask
from .problems import problem_response
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
    return _session_id_of(plain.request.path_params)


def _session_id_of(path_params: Mapping[str, Any]) -> str:
    value = str(path_params.get("session_id", ""))
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
    """One lane route: the plain-form check of its requests and its answer."""

    def __init__(self, lane: LaneRoute, route: APIRoute) -> None:
        self._lane = lane
        self._route = route
        self.path = lane.path
        """The route template: it labels the request's metrics, as FastAPI's route does."""
        self.served = 0
        """Requests this lane answered itself, errors included (the rest went to the
        app)."""

    async def answer(self, plain: Plain, scope: Scope, receive: Receive, send: Send) -> None:
        response = Response()
        del response.headers["content-length"]
        response.status_code = None  # type: ignore[assignment]
        result = await self._lane.call(plain, response)
        answer = result if isinstance(result, Response) else self._json(result, response)
        await answer(scope, receive, send)

    def plain(self, scope: Scope, receive: Receive, body: bytes) -> Plain:
        """The request in plain form (its path parameters in ``scope``), or
        ``_Fallback``: every value the endpoint adapter reads is checked here."""
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
        _wait(query)
        _flag(query, "cancel_on_disconnect")
        if "session_id" in scope["path_params"]:
            _session_id_of(scope["path_params"])
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


async def _read_body(receive: Receive) -> bytes | None:
    """The request's body, or ``None`` if the client left before sending all of it."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def lanes() -> dict[str, LaneApp]:
    """A lane for each hot route, by the name of its FastAPI route."""
    routes = {route.name: route for route in _api_routes()}
    return {lane.name: LaneApp(lane, routes[lane.name]) for lane in LANE}


class FrontDoor:
    """The outermost ASGI layer of an app with a fast lane (see the module docstring)."""

    def __init__(
        self,
        inner: ASGIApp,
        app: FastAPI,
        lanes: Mapping[str, LaneApp],
        metrics: RequestMetrics,
        max_body_bytes: int,
    ) -> None:
        self._inner = inner
        self._app = app
        self._routes = [(compile_path(lane.path)[0], lane) for lane in lanes.values()]
        self._metrics = metrics
        self._max = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self._lane_of(scope)
        if found is None:
            await self._inner(scope, receive, send)
            return
        lane, path_params = found
        body = await _read_body(receive)
        if body is None:
            return  # the client left: nothing to answer
        replay = replaying(body, receive)
        scope["app"] = self._app
        scope["path_params"] = path_params
        try:
            if len(body) > self._max:
                raise _Fallback  # more than it declared: the app refuses it
            plain = lane.plain(scope, replay, body)
        except _Fallback:
            await self._inner(scope, replay, send)
            return
        scope["route"] = lane
        started = False

        async def counted(message: Any) -> None:
            nonlocal started
            started = True
            await sending(message)

        sending = self._metrics.counting(scope, send)
        try:
            await lane.answer(plain, scope, replay, counted)
        except Exception as error:
            if started:
                raise
            path = Request(scope).url.path
            response, unexpected = problem_response(error, scope["method"], path)
            await response(scope, replay, counted)
            lane.served += 1
            if unexpected:
                raise  # logged by the server, as the app's own 500s are
        else:
            lane.served += 1

    def _lane_of(self, scope: Scope) -> tuple[LaneApp, dict[str, str]] | None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        length = declared_length(scope)
        if length is None or length < 0 or length > self._max:
            return None  # no length, a bad one or too long: the app refuses it
        path = scope["path"]
        for pattern, lane in self._routes:
            match = pattern.match(path)
            if match is not None:
                return lane, match.groupdict()
        return None


def _api_routes() -> list[APIRoute]:
    found: list[APIRoute] = []
    for router in (sessions.router, tasks.router):
        found.extend(route for route in router.routes if isinstance(route, APIRoute))
    return found


__all__ = ["LANE", "FrontDoor", "LaneApp", "lanes"]
