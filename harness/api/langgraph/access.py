"""The tenant of a LangGraph request: its key as ``x-api-key`` (what the SDKs send, from
``LANGGRAPH_API_KEY``) or as ``Authorization: Bearer``, the same tenant tokens as ``/v1``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials

from ..auth import CHALLENGE, Tenants, bearer, unauthorized
from ..problems import ProblemError, ProblemType
from ..state import ApiState, api_state
from .service import LangGraphService

api_key = APIKeyHeader(
    name="x-api-key",
    auto_error=False,
    scheme_name="x-api-key",
    description="A tenant's token (AHP_API_TOKENS), as the LangGraph SDKs send it.",
)


async def lg_tenant(
    request: Request,
    key: Annotated[str | None, Depends(api_key)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> str:
    """FastAPI dependency: the tenant the request's key names (else 401)."""
    presented = key if key else (None if credentials is None else credentials.credentials)
    if not presented:
        raise ProblemError(
            ProblemType.UNAUTHORIZED,
            401,
            "send x-api-key: <token> (or Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": CHALLENGE},
        )
    tenants: Tenants = request.app.state.tenants
    name = tenants.tenant_of(presented)
    if name is None:
        raise unauthorized("the API key is not valid")
    return name


async def lg_service(
    request: Request, api: Annotated[ApiState, Depends(api_state)]
) -> LangGraphService:
    """The app's LangGraph service (made once, with the app's state)."""
    service: LangGraphService | None = getattr(request.app.state, "langgraph", None)
    if service is None or service.api is not api:
        service = LangGraphService(api)
        request.app.state.langgraph = service
    return service


Tenant = Annotated[str, Depends(lg_tenant)]
Service = Annotated[LangGraphService, Depends(lg_service)]

__all__ = ["Service", "Tenant", "lg_service", "lg_tenant"]
