"""What the agent's middleware reports through LangGraph's ``custom`` stream.

Tool calls and safeguard halts are reported where they happen (in the tools node and
the safeguard hooks) and reach the run's translator in stream order, between the model's
messages. Each item is a one-key dict naming its kind.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agent_harness_protocol import WorkStatus
from langgraph.config import get_stream_writer

TOOL_ITEM = "ahp_tool"
HALT_ITEM = "ahp_halt"
NOTICE_ITEM = "ahp_notice"
"""Something the caller should know about the run, reported as a ``Warning`` (OTHER)."""


class HaltReason(StrEnum):
    """Which safeguard ended a run."""

    ITERATION_LIMIT = "iteration_limit"
    LOOP_DETECTED = "loop_detected"
    BUDGET_EXCEEDED = "budget_exceeded"


@dataclass(frozen=True, slots=True)
class Halt:
    reason: HaltReason
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason.value, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Halt:
        return cls(HaltReason(data["reason"]), str(data["detail"]))


@dataclass(frozen=True, slots=True)
class ToolChange:
    """One status change of one tool call; ``work_id`` is the model's tool call id."""

    work_id: str
    name: str
    status: WorkStatus
    arguments: str | None = None
    result: str | None = None
    error: str | None = None


def canonical_arguments(arguments: Mapping[str, Any]) -> str:
    """The tool call's arguments as canonical JSON (sorted keys, no spaces)."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def report_tool_change(change: ToolChange) -> None:
    get_stream_writer()(
        {
            TOOL_ITEM: {
                "work_id": change.work_id,
                "name": change.name,
                "status": change.status.value,
                "arguments": change.arguments,
                "result": change.result,
                "error": change.error,
            }
        }
    )


def report_halt(halt: Halt) -> None:
    get_stream_writer()({HALT_ITEM: halt.to_json()})


def report_notice(message: str) -> None:
    get_stream_writer()({NOTICE_ITEM: message})


def notice_of(item: Any) -> str | None:
    data = item.get(NOTICE_ITEM) if isinstance(item, Mapping) else None
    return data if isinstance(data, str) else None


def tool_change_of(item: Any) -> ToolChange | None:
    data = item.get(TOOL_ITEM) if isinstance(item, Mapping) else None
    if not isinstance(data, Mapping):
        return None
    return ToolChange(
        str(data["work_id"]),
        str(data["name"]),
        WorkStatus(data["status"]),
        data.get("arguments"),
        data.get("result"),
        data.get("error"),
    )


def halt_of(item: Any) -> Halt | None:
    data = item.get(HALT_ITEM) if isinstance(item, Mapping) else None
    return Halt.from_json(data) if isinstance(data, Mapping) else None
