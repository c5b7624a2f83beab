"""The shapes of the messages both sides exchange, defined once.

- :class:`RunMessage`: the keyword arguments of the one Celery task a deployment's queue
  carries (``wire.celery_config.RUN_TASK``), published by callers and by the workers'
  sweeper, checked by the workers' intake before Celery sees it.
- :class:`MaintenanceRequest` / :class:`MaintenanceReply`: a caller asks any worker,
  through ``Keys.maintenance_queue``, to delete a released session's checkpoint thread and
  waits for the reply on ``Keys.maintenance_reply``.

Only JSON crosses; every decoder refuses what it does not know with ``ValueError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .codec import dumps, loads
from .keys import require_valid_id


@dataclass(frozen=True, slots=True)
class RunMessage:
    """Run task ``task_id`` (of session ``session_id``) of deployment ``namespace``.

    The Celery task id is the AHP task id; the message carries ids only, everything else is
    read from Redis by the claim."""

    namespace: str
    task_id: str
    session_id: str | None = None

    KEYWORDS = frozenset({"namespace", "task_id", "session_id"})
    """The keyword arguments a run message may carry (and the only ones)."""

    def __post_init__(self) -> None:
        require_valid_id("namespace", self.namespace)
        require_valid_id("task", self.task_id)
        if self.session_id is not None:
            require_valid_id("session", self.session_id)

    def kwargs(self) -> dict[str, str]:
        """The Celery keyword arguments of the message."""
        kwargs = {"namespace": self.namespace, "task_id": self.task_id}
        if self.session_id is not None:
            kwargs["session_id"] = self.session_id
        return kwargs


class MaintenanceOperation(StrEnum):
    DELETE_THREAD = "delete_thread"
    """Delete a checkpoint thread (a released session's stored context)."""


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError("reply is not a boolean")
    return value


@dataclass(frozen=True, slots=True)
class MaintenanceRequest:
    id: str
    operation: MaintenanceOperation
    thread_id: str
    reply: bool = True
    """Whether a caller waits for the reply (``Keys.maintenance_reply``); the requests the
    settle step of a single-task session queues have nobody waiting (``"reply": false``)."""

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "id": self.id,
            "op": self.operation.value,
            "thread_id": self.thread_id,
        }
        if not self.reply:
            data["reply"] = False
        return dumps(data)

    @classmethod
    def from_json(cls, raw: str | bytes) -> MaintenanceRequest:
        """Raises ``ValueError`` for anything but a well-formed request."""
        try:
            data: Any = loads(raw)
            request = cls(
                require_valid_id("request", str(data["id"])),
                MaintenanceOperation(data["op"]),
                require_valid_id("thread", str(data["thread_id"])),
                _flag(data.get("reply", True)),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"malformed maintenance request: {error}") from None
        return request


@dataclass(frozen=True, slots=True)
class MaintenanceReply:
    ok: bool
    error: str | None = None

    def to_json(self) -> str:
        return dumps({"ok": self.ok, "error": self.error})

    @classmethod
    def from_json(cls, raw: str | bytes) -> MaintenanceReply:
        try:
            data: Any = loads(raw)
            ok = data["ok"]
            error = data.get("error")
        except (KeyError, TypeError, ValueError, AttributeError) as failure:
            raise ValueError(f"malformed maintenance reply: {failure}") from None
        if not isinstance(ok, bool) or not isinstance(error, str | None):
            raise ValueError("malformed maintenance reply: wrong field types")
        return cls(ok, error)


__all__ = [
    "MaintenanceOperation",
    "MaintenanceReply",
    "MaintenanceRequest",
    "RunMessage",
]
