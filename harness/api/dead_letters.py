"""``GET /v1/dead-letters``: the work the deployment gave up on (``wire.dead_letters``).

A tenant's token lists the dead letters of its own tasks (tasks failed after
``AHP_MAX_DELIVERIES`` lost deliveries). A malformed message belongs to no tenant (nothing
in it can be trusted to name one): only the operator token (``AHP_API_OPERATOR_TOKEN``)
lists those, together with every tenant's. The operator token opens this route only.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, Field

from harness.redis_errors import reported
from wire.dead_letters import DeadLetter, DeadLetterKind, read_dead_letters

from .auth import Tenants, bearer, missing_credentials, unauthorized
from .openapi_docs import problems
from .state import ApiState, api_state

router = APIRouter(tags=["operations"])

ENTRY_ID_PATTERN = r"^[0-9]{1,19}-[0-9]{1,19}$"
"""A stream entry id (each part below 2**64, as Redis requires)."""


class DeadLetterList(BaseModel):
    """Dead letters younger than ``AHP_TASK_RETENTION``, newest first."""

    dead_letters: list[DeadLetter]
    next_before: str | None = Field(
        description="Pass as ``before`` for the next, older page; ``null``: no more."
    )


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


async def viewer(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> str | None:
    """The tenant whose dead letters the token may list, or ``None`` for the operator
    token (every dead letter); else 401."""
    if credentials is None:
        raise missing_credentials()
    api: ApiState = request.app.state.api
    presented = credentials.credentials
    operator = api.settings.operator_token
    # Both comparisons always run: the time does not tell which kind of token it was.
    is_operator = hmac.compare_digest(
        _digest(presented), _digest(operator.get_secret_value() if operator else "")
    )
    tenants: Tenants = request.app.state.tenants
    name = tenants.tenant_of(presented)
    if operator is not None and is_operator:
        return None
    if name is None:
        raise unauthorized("the bearer token is not valid")
    return name


@router.get(
    "/v1/dead-letters",
    response_model=DeadLetterList,
    responses=problems(),
    summary="List dead letters",
)
async def list_dead_letters(
    owner: Annotated[str | None, Depends(viewer)],
    api: Annotated[ApiState, Depends(api_state)],
    kind: Annotated[DeadLetterKind | None, Query(description="Only this kind.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many.")] = 100,
    before: Annotated[
        str | None,
        Query(pattern=ENTRY_ID_PATTERN, description="Only entries older than this id."),
    ] = None,
) -> DeadLetterList:
    """Tasks failed after their worker was lost ``AHP_MAX_DELIVERIES`` times and malformed
    messages dropped from the queue, kept for ``AHP_TASK_RETENTION``, newest first. A
    tenant's token lists its own tasks' only; the operator token
    (``AHP_API_OPERATOR_TOKEN``) lists every one, malformed messages included."""
    with reported("the dead letters could not be read"):
        page = await read_dead_letters(
            api.events_redis,
            api.keys,
            api.core.task_retention,
            tenant=owner,
            kind=kind,
            limit=limit,
            before=before,
        )
    return DeadLetterList(dead_letters=list(page.letters), next_before=page.next_before)


__all__ = ["DeadLetterList", "router", "viewer"]
