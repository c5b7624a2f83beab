"""The token usage shape, declared once.

:class:`Usage` is the one declaration of a usage record's fields: the stored JSON of every
task and session record (``wire.codec``), the HTTP API's bodies and their OpenAPI schema
(``harness.api``), and the Lua scripts that sum usage (``--! const USAGE_FIELDS``,
expanded by ``wire.scripts``) all derive from it. ``None`` where nothing measured a field,
never a made-up zero.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Usage(BaseModel):
    """Token usage; ``null`` where nothing measured it (never a made-up zero)."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int | None
    cached_input_tokens: int | None
    output_tokens: int | None
    reasoning_tokens: int | None
    total_tokens: int | None
    cache_write_input_tokens: int | None


USAGE_FIELDS: tuple[str, ...] = tuple(Usage.model_fields)
"""The field names of :class:`Usage`, in order (the AHP ``AgentUsage`` attributes)."""

__all__ = ["USAGE_FIELDS", "Usage"]
