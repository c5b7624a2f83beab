"""Configuration from the environment, in one settings object shared by both sides."""

from __future__ import annotations

from datetime import timedelta

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .keys import require_valid_id


class Settings(BaseSettings):
    """Every knob of a deployment. Environment variables use the ``AHP_`` prefix
    (``REDIS_URL`` is accepted too); durations accept seconds or ISO 8601."""

    model_config = SettingsConfigDict(env_prefix="AHP_", frozen=True, extra="ignore")

    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        validation_alias=AliasChoices("AHP_REDIS_URL", "REDIS_URL"),
        description="Redis 8 (or Redis Stack) holding records, streams, leases, checkpoints.",
    )
    broker_url: str | None = Field(
        default=None, description="Celery broker; defaults to redis_url."
    )
    checkpoint_url: str | None = Field(
        default=None, description="Redis for LangGraph checkpoints; defaults to redis_url."
    )
    namespace: str = Field(default="ahp", description="Prefix of every key of this deployment.")
    queue: str = Field(default="ahp.tasks", description="Celery queue of AHP task runs.")
    profiles: str = Field(
        default="wire.default_profiles:PROFILES",
        description="Import path of the profile registry both sides load.",
    )
    profile: str = Field(default="scripted", description="Profile used when none is named.")
    cleanup_per_task: timedelta = Field(default=timedelta(seconds=1))
    cleanup_total: timedelta = Field(default=timedelta(seconds=3))
    lease_ttl: timedelta = Field(
        default=timedelta(seconds=10),
        description="A session lease expires this long after its holder stopped renewing.",
    )
    visibility_timeout: timedelta = Field(
        default=timedelta(hours=2),
        description="Broker redelivery bound; must exceed the longest task.",
    )
    worker_concurrency: int = Field(default=2, ge=1)
    redis_max_connections: int = Field(default=256, ge=8)
    event_buffer_capacity: int = Field(default=256, ge=2)

    @field_validator(
        "cleanup_per_task", "cleanup_total", "lease_ttl", "visibility_timeout", mode="before"
    )
    @classmethod
    def _plain_seconds(cls, value: object) -> object:
        """Accept ``AHP_LEASE_TTL=3`` (seconds) besides ISO 8601 (``PT3S``)."""
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                return value
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace_is_key_safe(cls, value: str) -> str:
        return require_valid_id("namespace", value)

    @property
    def effective_broker_url(self) -> str:
        return self.broker_url or self.redis_url

    @property
    def effective_checkpoint_url(self) -> str:
        return self.checkpoint_url or self.redis_url
