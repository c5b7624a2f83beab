"""The HTTP API's configuration, from the environment (``AHP_API_*``).

Secrets (bearer tokens, the webhook signing secret) are ``SecretStr``: they never appear in
a ``repr``, a log line or an error. Durations accept seconds or ISO 8601, like the
deployment's own settings (``wire.settings``).
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from wire.keys import ID_RULE, is_valid_id
from wire.settings import plain_seconds
from wire.tenants import TenantLimits

MIB = 1024 * 1024


class ApiSettings(BaseSettings):
    """Every knob of the HTTP submit API."""

    model_config = SettingsConfigDict(
        env_prefix="AHP_API_",
        frozen=True,
        extra="ignore",
        hide_input_in_errors=True,  # an error must never print a token
    )

    tokens: dict[str, tuple[SecretStr, ...]] = Field(
        default_factory=dict,
        description="Bearer tokens as a JSON object mapping each tenant to its token, or a "
        'list of tokens while one is rotated (``{"acme": "<token>"}``); merged with '
        "``tokens_file``. A tenant is 1-128 characters [A-Za-z0-9_.-]; a token at least 16.",
    )
    tokens_file: Path | None = Field(
        default=None,
        description="A JSON file of the same shape as ``tokens`` (a mounted secret).",
    )
    max_body_bytes: int = Field(
        default=MIB,
        ge=1024,
        description="Requests with a larger body are refused with 413 before it is parsed.",
    )
    max_input_bytes: int = Field(
        default=512 * 1024,
        ge=1,
        description="A task input larger than this in UTF-8 is refused with 413 (the "
        "harness's admission also limits its characters).",
    )
    max_instructions_bytes: int = Field(
        default=256 * 1024,
        ge=1,
        description="Session instructions larger than this in UTF-8 are refused with 413.",
    )
    max_wait: timedelta = Field(
        default=timedelta(seconds=60),
        gt=timedelta(0),
        description="The longest ``wait`` a request may ask for.",
    )
    webhook_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Host names (exact, lower case, optionally ``host:port``) completion "
        "webhooks may be sent to; empty: webhooks are refused.",
    )
    webhook_secret: SecretStr | None = Field(
        default=None,
        description="HMAC-SHA256 key that signs every webhook; without it webhooks are refused.",
    )
    webhook_allow_http: bool = Field(
        default=False, description="Allow plain http:// webhook URLs (tests, private networks)."
    )
    webhook_attempts: int = Field(default=5, ge=1, le=20)
    webhook_first_delay: timedelta = Field(default=timedelta(seconds=1), gt=timedelta(0))
    webhook_timeout: timedelta = Field(default=timedelta(seconds=10), gt=timedelta(0))
    metrics_token: SecretStr | None = Field(
        default=None,
        description="When set, ``GET /metrics`` requires this bearer token; else it is open "
        "(it shows pool-wide counts only, never ids or inputs).",
    )
    operator_token: SecretStr | None = Field(
        default=None,
        description="When set, this bearer token reads every dead letter of the deployment "
        "(``GET /v1/dead-letters``: all tenants' and the malformed messages, which belong "
        "to no tenant); it opens no other route. Unset: a tenant's token lists only its "
        "own tasks' dead letters and nobody lists malformed messages over HTTP (the "
        "``ahp-celery dead-letters`` command still does). At least 16 characters.",
    )
    tenant_limits: dict[str, TenantLimits] = Field(
        default_factory=dict,
        description="Per-tenant limits as a JSON object mapping a tenant to its limits "
        '(``{"acme": {"running": 8, "queued": 1000, "starts_per_second": 20}}``; each of '
        "``running``, ``queued``, ``starts_per_second`` and ``burst`` optional). A tenant "
        "not listed has ``default_tenant_limits``. See docs/tenants.md.",
    )
    default_tenant_limits: TenantLimits = Field(
        default_factory=TenantLimits,
        description="The limits of every tenant ``tenant_limits`` does not list (JSON, "
        "the same shape); default: none.",
    )
    handle_cache: int = Field(
        default=4096,
        ge=16,
        description="Task handles kept in memory; a miss attaches a new handle from Redis.",
    )
    keep_alive: timedelta = Field(
        default=timedelta(seconds=75),
        ge=timedelta(seconds=1),
        description="How long an idle keep-alive connection stays open (uvicorn's "
        "``timeout_keep_alive``, whole seconds). Longer than the clients' and proxies' own "
        "idle timeouts (aiohttp 15 s, httpx 5 s, nginx upstreams 60 s), so none of them "
        "sends a request on a connection the server is closing: uvicorn's 5 s default "
        "lost such requests (``Server disconnected``).",
    )

    @field_validator("tokens", mode="before")
    @classmethod
    def _token_lists(cls, value: object) -> object:
        if isinstance(value, dict):
            return {key: _as_list(item) for key, item in value.items()}
        return value

    @field_validator(
        "max_wait", "webhook_first_delay", "webhook_timeout", "keep_alive", mode="before"
    )
    @classmethod
    def _plain_seconds(cls, value: object) -> object:
        return plain_seconds(value)

    @field_validator("webhook_hosts", mode="before")
    @classmethod
    def _hosts(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return tuple(json.loads(text))
            return tuple(part.strip() for part in text.split(",") if part.strip())
        return value

    @field_validator("webhook_hosts")
    @classmethod
    def _lower_hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(host.lower() for host in value)

    @model_validator(mode="after")
    def _tenants_are_ids(self) -> ApiSettings:
        for tenant, tokens in self.tenant_tokens().items():
            if not is_valid_id(tenant):
                raise ValueError(f"a tenant name must be {ID_RULE}")
            if any(len(token.get_secret_value()) < 16 for token in tokens):
                raise ValueError(f"a token of tenant {tenant} is shorter than 16 characters")
        return self

    @field_validator("tenant_limits")
    @classmethod
    def _limited_tenants_are_ids(cls, value: dict[str, TenantLimits]) -> dict[str, TenantLimits]:
        for tenant in value:
            if not is_valid_id(tenant):
                raise ValueError(f"a tenant name must be {ID_RULE}")
        return value

    def limits_of(self, tenant: str) -> TenantLimits:
        """The limits every start of ``tenant``'s tasks meets."""
        return self.tenant_limits.get(tenant, self.default_tenant_limits)

    @field_validator("operator_token")
    @classmethod
    def _long_operator_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("the operator token is shorter than 16 characters")
        return value

    def uvicorn_options(self) -> dict[str, Any]:
        """What the server that serves the API takes from these settings (``ahp-celery
        api`` and the tests' live servers alike)."""
        return {"timeout_keep_alive": math.ceil(self.keep_alive.total_seconds())}

    def tenant_tokens(self) -> dict[str, tuple[SecretStr, ...]]:
        """Every tenant's tokens: ``tokens`` and the ``tokens_file``."""
        merged = dict(self.tokens)
        if self.tokens_file is not None:
            merged.update(_read_tokens(self.tokens_file))
        return merged


def _as_list(value: object) -> object:
    return [value] if isinstance(value, str | SecretStr) else value


def _read_tokens(path: Path) -> dict[str, tuple[SecretStr, ...]]:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read the tokens file {path}: {type(error).__name__}") from None
    tokens: dict[str, tuple[SecretStr, ...]] = {}
    if isinstance(data, dict):
        for tenant, value in data.items():
            items = _as_list(value)
            if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
                break
            tokens[str(tenant)] = tuple(SecretStr(item) for item in items)
        else:
            return tokens
    raise ValueError(f"the tokens file {path} must map tenants to a token or a list of tokens")


__all__ = ["ApiSettings"]
