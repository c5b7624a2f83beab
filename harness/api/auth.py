"""Bearer tokens to tenants.

Every request to ``/v1`` names its tenant by ``Authorization: Bearer <token>``. The token
is compared with every configured token in constant time (``hmac.compare_digest``, all of
them, whatever matched), so neither the answer nor its timing tells how close a guess was.
Tokens are never logged, echoed or stored: only the tenant name travels further.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr

from .problems import ProblemError, ProblemType

CHALLENGE = 'Bearer realm="ahp"'

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A tenant's token (AHP_API_TOKENS); another tenant's sessions and tasks "
    "answer 404 exactly like unknown ones.",
)


def _digest(token: bytes) -> bytes:
    """Tokens are compared as SHA-256 digests: equal lengths, so not even a token's length
    shows in the comparison's time."""
    return hashlib.sha256(token).digest()


class Tenants:
    """The configured tokens (as digests), for constant-time comparison."""

    def __init__(self, tokens: Mapping[str, tuple[SecretStr, ...]]) -> None:
        self._tokens = tuple(
            (_digest(token.get_secret_value().encode()), tenant)
            for tenant, listed in tokens.items()
            for token in listed
        )

    def __len__(self) -> int:
        return len(self._tokens)

    def tenant_of(self, presented: str) -> str | None:
        candidate = _digest(presented.encode("utf-8", "replace"))
        found: str | None = None
        for token, tenant in self._tokens:
            if hmac.compare_digest(token, candidate):
                found = tenant
        return found


def unauthorized(detail: str) -> ProblemError:
    return ProblemError(
        ProblemType.UNAUTHORIZED,
        401,
        detail,
        headers={"WWW-Authenticate": f'{CHALLENGE}, error="invalid_token"'},
    )


def missing_credentials(detail: str = "send Authorization: Bearer <token>") -> ProblemError:
    """401 for a request that presents no credentials at all."""
    return ProblemError(
        ProblemType.UNAUTHORIZED, 401, detail, headers={"WWW-Authenticate": CHALLENGE}
    )


async def tenant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> str:
    """FastAPI dependency: the tenant the request's bearer token names (else 401)."""
    if credentials is None:
        raise missing_credentials()
    tenants: Tenants = request.app.state.tenants
    name = tenants.tenant_of(credentials.credentials)
    if name is None:
        raise unauthorized("the bearer token is not valid")
    return name


__all__ = ["Tenants", "bearer", "missing_credentials", "tenant", "unauthorized"]
