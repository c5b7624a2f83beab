"""The seam where an approval-gated tool call asks for a decision before its effect.

The tool guard (``workers.middleware.ToolGuard``) calls :meth:`ApprovalRoute.authorize`
for every call of a tool whose ``ToolSpec.approval`` is ``REQUIRED``, after the cancel gate
and before the effect (and before the ``STARTED`` report). A route that asks the caller
raises LangGraph's ``interrupt(payload)`` in there (payload: decision 3 of the issue 9
brief); on resume the same call replays and gets the caller's decision back. The default
route has no caller to ask: it declines, so no unapproved effect ever happens.
"""

from __future__ import annotations

from dataclasses import dataclass

from langgraph.prebuilt.tool_node import ToolCallRequest

from wire.profiles import ToolSpec


@dataclass(frozen=True, slots=True)
class Authorization:
    """The decision on one tool call: approved, or declined with the message the model
    gets back in place of the tool's result."""

    approved: bool
    message: str = ""


class ApprovalRoute:
    """Decides approval-gated tool calls. The default declines them all."""

    async def authorize(self, request: ToolCallRequest, spec: ToolSpec) -> Authorization:
        return Authorization(
            False,
            f"declined: {spec.name} needs the caller's approval ({spec.effect}) and this "
            "task has no approval route",
        )
