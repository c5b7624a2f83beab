"""The tenant of a LangGraph request: its key as ``x-api-key`` (what the SDKs send, from
``LANGGRAPH_API_KEY``) or as ``Authorization: Bearer``, the same tenant tokens as ``/v1``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials

from ..auth import Tenants, bearer, missing_credentials, unauthorized
from ..state import ApiState, api_state
from .service import LangGraphService


async def lg_tenant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> str:
    """FastAPI dependency: the tenant the request's key names (else 401). Every
    credential the request presents must be valid and name the same tenant."""
    # The SDKs' x-api-key is read here rather than declared as a second security scheme:
    # the OpenAPI document keeps one scheme, the bearer token every route takes.
    key = request.headers.get("x-api-key")
    presented = [
        value for value in (key, None if credentials is None else credentials.credentials) if value
    ]
    if not presented:
        raise missing_credentials("send x-api-key: <token> (or Authorization: Bearer <token>)")
    tenants: Tenants = request.app.state.tenants
    names = {tenants.tenant_of(value) for value in presented}
    if None in names or len(names) != 1:
        raise unauthorized("the API key is not valid")
    (name,) = names
    assert name is not None
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
