"""Caller side of the distributed AHP harness: the port, its handles and their errors.

The operator tooling (CLI, demo, embedded Redis, worker processes) lives in ``tooling``."""

from wire.profiles import AgentProfile, CancellationSemantics, ModelSpec
from wire.settings import Settings
from wire.statistics import Histogram, TaskStatistics
from wire.store import BusyPolicy
from wire.tenants import TenantLimits

from .errors import (
    CeleryHarnessError,
    CheckpointCleanupError,
    IdempotencyKeyReusedError,
    InteractionClosedError,
    RemoteTaskError,
    SessionBusyError,
    TenantLimitError,
    TenantQueueFullError,
    TenantRateLimitedError,
    UnknownInteractionError,
    UnknownSessionError,
    UnknownTaskError,
)
from .harness import CeleryHarness
from .info import SessionInfo, TaskInfo, TaskMetrics
from .runs import StartedRun, start_run
from .session import CelerySession
from .task import CeleryTask

__all__ = [
    "AgentProfile",
    "BusyPolicy",
    "CancellationSemantics",
    "CeleryHarness",
    "CeleryHarnessError",
    "CelerySession",
    "CeleryTask",
    "CheckpointCleanupError",
    "Histogram",
    "IdempotencyKeyReusedError",
    "InteractionClosedError",
    "ModelSpec",
    "RemoteTaskError",
    "SessionBusyError",
    "SessionInfo",
    "Settings",
    "StartedRun",
    "TaskInfo",
    "TaskMetrics",
    "TaskStatistics",
    "TenantLimitError",
    "TenantLimits",
    "TenantQueueFullError",
    "TenantRateLimitedError",
    "UnknownInteractionError",
    "UnknownSessionError",
    "UnknownTaskError",
    "start_run",
]
