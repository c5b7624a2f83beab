"""Caller side of the distributed AHP harness: the port, handles, HTTP API and CLI."""

from wire.profiles import AgentProfile, CancellationSemantics, ModelSpec
from wire.settings import Settings

from .errors import (
    CeleryHarnessError,
    CheckpointCleanupError,
    RemoteTaskError,
    SessionBusyError,
    UnknownSessionError,
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
    "UnknownSessionError",
]
