"""Effects reported from inside a graph run, as AHP ``EffectChanged`` events.

Whatever performs an effect in a node (an approval-gated tool) reports it with
:func:`report_effect`: a LangGraph custom stream item, which the turn's translator turns
into ``EffectChanged`` on the task's stream (:func:`effect_of`). The ``work_id`` is the
tool call's id, the same the approval request carried.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_harness_protocol import EffectChanged, EffectKind, TaskId, WorkId, WorkStatus
from langgraph.config import get_stream_writer

EFFECT_ITEM = "ahp_effect"
"""The key of a custom stream item that reports an effect."""


def report_effect(
    work_id: str,
    status: WorkStatus,
    *,
    kind: EffectKind = EffectKind.OTHER,
    description: str | None = None,
    output: str | None = None,
) -> None:
    """Report an effect's change from inside a node (no-op outside a graph run)."""
    try:
        writer = get_stream_writer()
    except RuntimeError:
        return
    writer(
        {
            EFFECT_ITEM: {
                "work_id": work_id,
                "kind": kind.value,
                "status": status.value,
                "description": description,
                "output": output,
            }
        }
    )


def effect_of(task_id: TaskId, item: Any) -> EffectChanged | None:
    """The ``EffectChanged`` a custom stream item reports, if it is one."""
    if not isinstance(item, Mapping) or not isinstance(item.get(EFFECT_ITEM), Mapping):
        return None
    data = item[EFFECT_ITEM]
    return EffectChanged(
        task_id,
        WorkId(str(data["work_id"])),
        EffectKind(data["kind"]),
        WorkStatus(data["status"]),
        data.get("description"),
        data.get("output"),
    )


__all__ = ["EFFECT_ITEM", "effect_of", "report_effect"]
