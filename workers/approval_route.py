"""The approval route that asks the task's caller: a LangGraph interrupt per gated call.

``ToolGuard`` calls :meth:`CallerApprovalRoute.authorize` before the effect of every tool
whose ``ToolSpec.approval`` is ``REQUIRED``. The route raises ``interrupt`` with the call's
approval payload (``workers.interrupts.ask_approval``): the task pauses, holding no worker;
when the caller's answer resumes it on any worker, the node replays and the route returns
the decision. A session that requires ``DENY_ALL`` is never asked: every gated call is
declined. ``PROVIDER_DEFAULT`` and ``CALLER_DECIDES`` ask the caller.
``APPROVE_FOR_SESSION`` is offered only for a tool whose spec describes a
``session_grant``, and the grant is enforced here: a granted tool is not asked again in
that session. A declined (or cancelled) call never runs; the model reads why.
"""

from __future__ import annotations

from agent_harness_protocol import ApprovalDecision, ApprovalRequirement
from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolCallRequest

from wire.interactions import DECLINED_MESSAGE
from wire.profiles import ToolSpec
from wire.store import RecordStore

from .approvals import ApprovalRoute, Authorization
from .interrupts import ask_approval

_APPROVED = {ApprovalDecision.APPROVE_ONCE, ApprovalDecision.APPROVE_FOR_SESSION}

APPROVAL_METADATA = "ahp_approval"
"""Run metadata: the session's ``ApprovalRequirement`` value (set by the runner)."""


class CallerApprovalRoute(ApprovalRoute):
    def __init__(self, store: RecordStore) -> None:
        self._store = store

    async def authorize(self, request: ToolCallRequest, spec: ToolSpec) -> Authorization:
        metadata = get_config().get("metadata", {})
        if metadata.get(APPROVAL_METADATA) == ApprovalRequirement.DENY_ALL.value:
            return Authorization(
                False, f"declined: the session denies every approval ({spec.name}: {spec.effect})"
            )
        call = request.tool_call
        decision = await ask_approval(
            self._store,
            session_id=str(metadata.get("ahp_session_id", "")),
            task_id=str(metadata.get("ahp_task_id", "")),
            tool_call_id=str(call.get("id") or ""),
            tool=spec.name,
            arguments=dict(call.get("args") or {}),
            effect=spec.effect,
            session_grant=spec.session_grant,
        )
        if decision in _APPROVED:
            return Authorization(True)
        if decision is ApprovalDecision.CANCEL:
            return Authorization(False, "cancelled by the caller")
        return Authorization(False, DECLINED_MESSAGE)


__all__ = ["CallerApprovalRoute"]
