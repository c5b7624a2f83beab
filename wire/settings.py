"""Configuration from the environment, in one settings object shared by both sides."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .keys import require_valid_id
from .queue_names import parse_queues, require_queue_name

DEFAULT_WORKER_RUNS = 250
"""Runs per worker process by default (``bench/scale.py``: see docs/benchmarks.md)."""


class WorkerLossPolicy(StrEnum):
    """What happens to a task whose worker was lost mid-run (killed, OOM, partitioned)."""

    RESUME = "resume"
    """Run it again from the session's last checkpoint, under a higher fence."""
    UNRESOLVED = "unresolved"
    """Settle it ``Unresolved(OBSERVATION_LOST)``: the lost run's effects are unknown."""


class TracingMode(StrEnum):
    """Whether a process of the deployment (worker, ``ahp-celery api``, ``ahp-celery run``)
    sets up OpenTelemetry's SDK and exports its spans (``wire.tracing_setup``)."""

    AUTO = "auto"
    """On when the standard environment asks for an exporter: ``OTEL_TRACES_EXPORTER``
    (other than ``none``), ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set."""
    OTLP = "otlp"
    """On: OTLP export as ``OTEL_EXPORTER_OTLP_*`` configure it (default
    ``http://localhost:4318``)."""
    OFF = "off"
    """Off, whatever ``OTEL_*`` says."""


def plain_seconds(value: object) -> object:
    """A ``timedelta`` setting's raw value: ``AHP_LEASE_TTL=3`` (seconds) is accepted
    besides ISO 8601 (``PT3S``); anything else is left to pydantic."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


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
        default=None,
        description="Redis for LangGraph checkpoints; defaults to redis_url and must name "
        "the same Redis (workers refuse another: checkpoint writes are fenced by the "
        "session lease in one atomic script).",
    )
    namespace: str = Field(default="ahp", description="Prefix of every key of this deployment.")
    queue: str = Field(
        default="ahp.tasks",
        description="Celery queue of AHP task runs (of every profile that names no queue "
        "of its own).",
    )
    worker_queues: str = Field(
        default="",
        description="Comma-separated queues `ahp-celery worker` serves (its --queues "
        "default); empty: AHP_QUEUE.",
    )
    profiles: str = Field(
        default="wire.default_profiles:PROFILES",
        description="Import path of the profile registry both sides load.",
    )
    profile: str = Field(default="scripted", description="Profile used when none is named.")
    cleanup_per_task: timedelta = Field(default=timedelta(seconds=1))
    cleanup_total: timedelta = Field(default=timedelta(seconds=3))
    lease_ttl: timedelta = Field(
        default=timedelta(seconds=6),
        description="A session lease expires this long after its holder stopped renewing; "
        "a lost worker's task is recovered about this long after the loss.",
    )
    on_worker_loss: WorkerLossPolicy = Field(
        default=WorkerLossPolicy.RESUME,
        description="resume: rerun a lost worker's task from the last checkpoint; "
        "unresolved: settle it Unresolved(observation_lost). A run a stopping worker "
        "handed back is not lost: it resumes under either policy.",
    )
    max_deliveries: int = Field(
        default=3,
        ge=1,
        description="A task whose worker was lost this many times ends Failed (poison task); "
        "a run handed back by a stopping worker does not count.",
    )
    sweep_interval: timedelta = Field(
        default=timedelta(seconds=1),
        description="How often each worker looks for claimed tasks whose lease lapsed.",
    )
    unpublished_start_timeout: timedelta = Field(
        default=timedelta(seconds=60),
        description="A start whose run message never reached the broker (its caller "
        "stopped between recording and publishing it, and no retry with its "
        "Idempotency-Key published it) is settled Failed after this long, freeing its "
        "session; it never ran.",
    )
    handle_ttl: timedelta = Field(
        default=timedelta(seconds=30),
        description="An open handle of a persistent session counts as open this long after "
        "its caller last refreshed it (a crashed caller's handles lapse).",
    )
    visibility_timeout: timedelta = Field(
        default=timedelta(hours=2),
        description="Broker redelivery bound; must exceed the longest task.",
    )
    task_retention: timedelta = Field(
        default=timedelta(days=7),
        gt=timedelta(0),
        description="A settled task's record and event stream expire this long after it "
        "settled (whatever path settled it).",
    )
    idempotency_retention: timedelta = Field(
        default=timedelta(hours=24),
        gt=timedelta(0),
        description="A start's Idempotency-Key answers a retried request with the same task "
        "this long after the first request.",
    )
    checkpoints_kept: int = Field(
        default=2,
        ge=1,
        description="Checkpoints each session's thread keeps (the latest and its parents): "
        "older ones are pruned after every turn, so stored context grows with the "
        "conversation, not with the square of its turns.",
    )
    worker_runs: int = Field(
        default=DEFAULT_WORKER_RUNS,
        ge=1,
        description="Runs one worker process carries at once, all on its one event loop "
        "(the threads pool's size: each delivery parks a pool thread on the loop). "
        "A worker container carries worker_processes x worker_runs.",
    )
    worker_processes: int = Field(
        default=1,
        ge=1,
        description="Worker processes `ahp-celery worker` starts (one event loop each; a "
        "process uses about one core).",
    )
    worker_blocking_threads: int = Field(
        default=8,
        ge=1,
        description="Threads of a worker process's executor for blocking work (sync tools, "
        "a local model): never run on the loop.",
    )
    worker_max_loop_lag: timedelta = Field(
        default=timedelta(milliseconds=500),
        gt=timedelta(0),
        description="A worker process takes no new run while its event loop runs work "
        "this late (a saturated loop stops admitting before its runs slow further).",
    )
    worker_concurrency: int = Field(
        default=2,
        ge=1,
        description="Pool size of the legacy `--pool prefork` layout: one run per child.",
    )
    redis_max_connections: int = Field(default=256, ge=8)
    event_buffer_capacity: int = Field(default=256, ge=2)
    tracing: TracingMode = Field(
        default=TracingMode.AUTO,
        description="OpenTelemetry traces of the deployment's processes: auto (on when "
        "OTEL_TRACES_EXPORTER or OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT is set), otlp, off. "
        "OTEL_SDK_DISABLED=true turns it off. A harness in your own program never sets "
        "tracing up: it uses the tracer provider your program installed.",
    )

    @field_validator(
        "cleanup_per_task",
        "cleanup_total",
        "lease_ttl",
        "visibility_timeout",
        "sweep_interval",
        "unpublished_start_timeout",
        "handle_ttl",
        "task_retention",
        "idempotency_retention",
        "worker_max_loop_lag",
        mode="before",
    )
    @classmethod
    def _plain_seconds(cls, value: object) -> object:
        return plain_seconds(value)

    @field_validator("namespace")
    @classmethod
    def _namespace_is_key_safe(cls, value: str) -> str:
        return require_valid_id("namespace", value)

    @field_validator("profile", "queue")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank (unset it to use the default)")
        return value

    @field_validator("queue")
    @classmethod
    def _queue_is_a_name(cls, value: str) -> str:
        return require_queue_name(value)

    @field_validator("worker_queues")
    @classmethod
    def _worker_queues_are_names(cls, value: str) -> str:
        return ",".join(parse_queues(value, what="worker queue"))

    @property
    def effective_broker_url(self) -> str:
        return self.broker_url or self.redis_url

    @property
    def effective_checkpoint_url(self) -> str:
        return self.checkpoint_url or self.redis_url
