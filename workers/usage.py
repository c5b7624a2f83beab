"""Token usage of model messages: unknown stays unknown (``None``), never zero."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_harness_protocol import AgentUsage
from langchain_core.messages import BaseMessage

_RAW_USAGE_KEYS = ("token_usage", "usage")
_RAW_FIELDS = {
    "input_tokens": ("input_tokens", "prompt_tokens"),
    "output_tokens": ("output_tokens", "completion_tokens"),
    "total_tokens": ("total_tokens",),
}


def _raw_usage(message: BaseMessage) -> AgentUsage:
    """The provider's own usage report in ``response_metadata`` (OpenAI-style
    ``token_usage``/``usage``), for a model that fills no ``usage_metadata``: LangChain's
    ``usage_metadata`` requires all three counts, a provider may measure only some."""
    for key in _RAW_USAGE_KEYS:
        raw = message.response_metadata.get(key)
        if not isinstance(raw, Mapping):
            continue
        values: dict[str, int | None] = {}
        for field, names in _RAW_FIELDS.items():
            found = next((raw[name] for name in names if isinstance(raw.get(name), int)), None)
            values[field] = found
        if any(value is not None for value in values.values()):
            return AgentUsage(**values)
    return AgentUsage.UNKNOWN


def usage_of(message: BaseMessage) -> AgentUsage:
    """``usage_metadata`` as AgentUsage (else the provider's raw report); a missing field
    is unknown (None), never zero."""
    metadata: Mapping[str, Any] | None = getattr(message, "usage_metadata", None)
    if not metadata:
        return _raw_usage(message)
    input_details: Mapping[str, Any] = metadata.get("input_token_details") or {}
    output_details: Mapping[str, Any] = metadata.get("output_token_details") or {}
    return AgentUsage(
        input_tokens=metadata.get("input_tokens"),
        cached_input_tokens=input_details.get("cache_read"),
        output_tokens=metadata.get("output_tokens"),
        reasoning_tokens=output_details.get("reasoning"),
        total_tokens=metadata.get("total_tokens"),
        cache_write_input_tokens=input_details.get("cache_creation"),
    )


def measured_tokens(message: BaseMessage) -> int | None:
    """The tokens one model call used: its total, else input plus output; ``None`` when
    the call did not measure them."""
    usage = usage_of(message)
    if usage.total_tokens is not None:
        return usage.total_tokens
    if usage.input_tokens is not None and usage.output_tokens is not None:
        return usage.input_tokens + usage.output_tokens
    return None


def session_snapshot(usage: AgentUsage) -> AgentUsage | None:
    """The session usage to report: none at all when nothing of it was ever measured
    (every field unknown), as the settle script reports it."""
    return None if usage == AgentUsage.UNKNOWN else usage
