"""The LangGraph SDK's request bodies, as the server reads them.

Every field the SDKs send is declared: the ones served, the ones accepted only with the
value that changes nothing (``stream_subgraphs: false``, an empty ``config``), and the
ones refused with a 422 naming them. An unknown field is refused too (``extra=forbid``):
nothing is silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..problems import Issue, invalid
from .translate import MODES, REFUSED_MODES

UNSUPPORTED_RUN_FIELDS = (
    "checkpoint",
    "checkpoint_id",
    "interrupt_before",
    "interrupt_after",
    "webhook",
    "after_seconds",
    "feedback_keys",
    "checkpoint_during",
    "durability",
    "langsmith_tracer",
)
"""Run fields the server does not serve: set, they are refused (422) by name."""


class _Body(BaseModel):
    """Strict as the ``/v1`` bodies are: ``"yes"`` is no boolean, ``"5"`` no integer."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ThreadCreate(_Body):
    thread_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
    metadata: dict[str, Any] = Field(default_factory=dict)
    if_exists: Literal["raise", "do_nothing"] = "raise"
    ttl: Any = None
    supersteps: Any = None
    graph_id: str | None = None


class ThreadSearch(_Body):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    ids: list[str] | None = None
    status: Literal["idle", "busy", "interrupted", "error"] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    sort_by: str | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None
    extract: Any = None


class AssistantSearch(_Body):
    metadata: dict[str, Any] | None = None
    graph_id: str | None = None
    name: str | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    sort_by: str | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None


class Command(_Body):
    resume: Any = None
    update: Any = None
    goto: Any = None


class RunCreate(_Body):
    assistant_id: str
    input: dict[str, Any] | None = None
    command: Command | None = None
    stream_mode: str | list[str] = "values"
    stream_subgraphs: bool = False
    stream_resumable: bool = False
    on_disconnect: Literal["cancel", "continue"] = "continue"
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None
    if_not_exists: Literal["reject", "create"] = "reject"
    on_completion: Literal["delete", "keep"] = "delete"
    metadata: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    checkpoint: Any = None
    checkpoint_id: Any = None
    interrupt_before: Any = None
    interrupt_after: Any = None
    webhook: Any = None
    after_seconds: Any = None
    feedback_keys: Any = None
    checkpoint_during: Any = None
    durability: Any = None
    langsmith_tracer: Any = None
    strict_resume: bool | None = None

    @field_validator("stream_mode")
    @classmethod
    def _known_modes(cls, value: str | list[str]) -> str | list[str]:
        for mode in [value] if isinstance(value, str) else value:
            if mode in REFUSED_MODES:
                raise ValueError(f"stream_mode {mode!r} is not served (served: {', '.join(MODES)})")
            if mode not in MODES:
                raise ValueError(f"unknown stream_mode {mode!r} (served: {', '.join(MODES)})")
        return value

    def modes(self) -> frozenset[str]:
        return frozenset(
            [self.stream_mode] if isinstance(self.stream_mode, str) else self.stream_mode
        )

    def refuse_unsupported(self, *, stateless: bool) -> None:
        """422 for every field set to what the server does not serve, named."""
        issues = [
            Issue(path=f"body.{name}", message=f"{name} is not supported by this server")
            for name in UNSUPPORTED_RUN_FIELDS
            if getattr(self, name) is not None
        ]
        if self.stream_subgraphs:
            issues.append(Issue(path="body.stream_subgraphs", message="the agent has no subgraphs"))
        for name in ("config", "context"):
            if getattr(self, name):
                issues.append(
                    Issue(path=f"body.{name}", message=f"{name} is not supported (only empty)")
                )
        if self.multitask_strategy == "rollback":
            issues.append(
                Issue(
                    path="body.multitask_strategy",
                    message="rollback is not supported: a run's effects are not undone "
                    "(use interrupt, reject or enqueue)",
                )
            )
        if self.command is not None:
            if self.command.update is not None or self.command.goto is not None:
                issues.append(
                    Issue(path="body.command", message="only command.resume is supported")
                )
            if self.input is not None:
                issues.append(
                    Issue(path="body.input", message="a run takes input or command, not both")
                )
            if stateless:
                issues.append(
                    Issue(path="body.command", message="a resume needs a thread: runs on a thread")
                )
        elif self.input is None:
            issues.append(Issue(path="body.input", message="a run needs input (or command)"))
        if issues:
            raise invalid(issues)

    def input_text(self) -> str:
        """The task input: the text of the input's human messages (422 for any other)."""
        messages = (self.input or {}).get("messages")
        if not isinstance(messages, list) or not messages or set(self.input or {}) - {"messages"}:
            raise invalid(
                [
                    Issue(
                        path="body.input",
                        message='input must be {"messages": [{"role": "user", "content": "..."}]}',
                    )
                ]
            )
        texts: list[str] = []
        for index, message in enumerate(messages):
            text = _human_text(message)
            if text is None:
                raise invalid(
                    [
                        Issue(
                            path=f"body.input.messages.{index}",
                            message="each input message must be a user (human) message with text",
                        )
                    ]
                )
            texts.append(text)
        joined = "\n\n".join(texts)
        if not joined.strip():
            raise invalid([Issue(path="body.input.messages", message="the input has no text")])
        return joined


def _human_text(message: Any) -> str | None:
    if isinstance(message, str):
        return message
    if not isinstance(message, dict):
        return None
    role = message.get("role", message.get("type"))
    if role not in ("user", "human"):
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif (
                isinstance(block, dict)
                and block.get("type") == "text"
                and isinstance(block.get("text"), str)
            ):
                parts.append(block["text"])
            else:
                return None
        return "".join(parts)
    return None


__all__ = [
    "UNSUPPORTED_RUN_FIELDS",
    "AssistantSearch",
    "Command",
    "RunCreate",
    "ThreadCreate",
    "ThreadSearch",
]
