"""What every request of one app shares: the harness, the handles, the event reads."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from redis.asyncio import Redis

from harness.harness import CeleryHarness
from wire.keys import Keys
from wire.settings import Settings

from .auth import Tenants
from .handles import Handles
from .metrics import RequestMetrics
from .settings import ApiSettings
from .webhooks import Webhooks


@dataclass(eq=False)
class ApiState:
    settings: ApiSettings
    core: Settings
    harness: CeleryHarness
    handles: Handles
    webhooks: Webhooks
    tenants: Tenants
    requests: RequestMetrics
    keys: Keys
    events_redis: Redis
    """Reads of task event streams besides following them (backlogs, the last read after
    a settle) and the readiness probe; a small pool of its own. Streams are followed
    through the harness's stream reader."""


async def api_state(request: Request) -> ApiState:
    """The app's shared state. A coroutine on purpose: FastAPI runs a plain ``def``
    dependency in its thread pool, a thread hop on every request."""
    state: ApiState = request.app.state.api
    return state


__all__ = ["ApiState", "api_state"]
