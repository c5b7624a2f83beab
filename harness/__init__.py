"""Caller side of the distributed AHP harness: the port, its handles and their errors.

The operator tooling (CLI, demo, embedded Redis, worker processes) lives in ``tooling``."""

from wire.profiles import AgentProfile, CancellationSemantics, ModelSpec
from wire.settings import Settings

from .errors import (
    CeleryHarnessError,
    CheckpointCleanupError,
    RemoteTaskError,
    SessionBusyError,
)
from .harness import CeleryHarness

__all__ = [
    "AgentProfile",
    "CancellationSemantics",
    "CeleryHarness",
    "CeleryHarnessError",
    "CheckpointCleanupError",
    "ModelSpec",
    "RemoteTaskError",
    "SessionBusyError",
    "Settings",
]
