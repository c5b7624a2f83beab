"""Per-tenant limits, as the start script applies them (docs/tenants.md).

A start passes its tenant's :class:`TenantLimits`; ``start_task.lua`` applies them in the
same atomic step that records the task:

- ``starts_per_second`` (with ``burst``): a token bucket; a start past it is refused
  (``RATE_LIMITED``, with the time until a token is due) and writes nothing.
- ``running``: at most that many of the tenant's tasks are *admitted* (published,
  running, paused for the caller or resuming: started and not settled). A start beyond
  it is *parked*: recorded, with no run message, in the tenant's own line; each settle of
  an admitted task admits the oldest parked one, whose run a worker publishes at once.
  The broker queue therefore never holds more than ``running`` messages of one tenant,
  and another tenant's start waits behind at most those, never behind a burst.
- ``queued``: at most that many parked tasks; a start beyond it is refused
  (``QUEUE_FULL``) and writes nothing.
"""

from __future__ import annotations

import math
from datetime import timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class TenantField(StrEnum):
    """The fields of a tenant's limits record (``Keys.tenant_limits``)."""

    RUNNING = "running"
    QUEUED = "queued"


class TenantRateField(StrEnum):
    """The fields of a tenant's token bucket (``Keys.tenant_rate``)."""

    TOKENS = "tokens"
    """Tokens left, in thousandths of a start."""
    AT = "at"
    """Redis time (ms) the tokens were counted at."""


class TenantLimits(BaseModel):
    """One tenant's limits (in the API settings: ``AHP_API_TENANT_LIMITS``); unset: none."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    running: int | None = Field(default=None, ge=1, description="Tasks admitted at once.")
    queued: int | None = Field(
        default=None,
        ge=1,
        description="Tasks parked waiting for ``running``; a start beyond is refused (429).",
    )
    starts_per_second: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Sustained starts per second; a start beyond is refused (429).",
    )
    burst: int | None = Field(
        default=None,
        ge=1,
        description="Starts at once above the rate (default: one second's, at least 1).",
    )

    def bucket_size(self) -> int:
        """The token bucket's capacity: ``burst``, else one second's starts (at least 1)."""
        if self.burst is not None:
            return self.burst
        return max(1, math.ceil(self.starts_per_second or 1))

    def script_args(self, retention: timedelta) -> list[str | int]:
        """``start_task.lua``'s ARGV[9..13]: running, queued, rate, bucket ('' for none)
        and how long the tenant's limits record lives (always given: a running limit
        absent here is lifted)."""
        return [
            "" if self.running is None else self.running,
            "" if self.queued is None else self.queued,
            "" if self.starts_per_second is None else repr(float(self.starts_per_second)),
            self.bucket_size() if self.starts_per_second is not None else "",
            max(1, int(retention.total_seconds())),
        ]


NO_LIMITS = TenantLimits()
"""No limit: a running limit the tenant had is lifted (what it parked is admitted)."""

UNKNOWN_LIMITS: list[str | int] = ["", "", "", "", ""]
"""The script arguments of a start that knows no limits (a harness used without the API):
the tenant's recorded limits stay as they are."""


def retry_after(milliseconds: int) -> timedelta:
    """The wait a refused start reports, never below one millisecond."""
    return timedelta(milliseconds=max(1, milliseconds))


__all__ = [
    "NO_LIMITS",
    "UNKNOWN_LIMITS",
    "TenantField",
    "TenantLimits",
    "TenantRateField",
    "retry_after",
]
