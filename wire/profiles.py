"""Agent profiles: the one declaration that callers and workers both load.

A profile names the chat model a worker builds (by import path, never by a pickled
object), the model identity admitted for ``SessionSpec.model``, the tools the agent may
call (each by import path, with its effect and approval policy), the safeguards that bound
a run, an optional task pipeline, what cancelling the model coroutine proves, and the
disposition facts the harness cannot observe. Callers derive
``support``, ``validate()`` and admission from it; workers build the graph from it. The
session record stores the profile name and a digest of the declaration, so a worker that
loaded a different declaration refuses the task instead of running something else.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from agent_harness_protocol import ContextRetentionDisposition, UserHistoryVisibility

from .errors import ProfileError
from .keys import require_valid_id
from .pipelines import Pipeline
from .queue_names import require_queue_name

JsonValue = str | int | float | bool | None


class CancellationSemantics(StrEnum):
    """What termination of the model coroutine proves about the native work.

    ``UNCONFIRMED`` (default): a remote provider may keep working, so a cancelled model
    call ends ``Unresolved(CANCELLATION_UNCONFIRMED)``.
    ``COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED``: the coroutine is the whole native
    work (an in-process model), so its termination ends ``Cancelled``.
    """

    UNCONFIRMED = "unconfirmed"
    COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED = "coroutine_termination_confirms_work_stopped"


class ModelSource(StrEnum):
    """How ``ModelSpec.target`` names the chat model."""

    IMPORT_PATH = "import_path"
    PROVIDER = "provider"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """How a worker builds the chat model.

    With ``source=IMPORT_PATH`` (default), ``target`` is an import path
    ``"package.module:Attribute"`` of a ``BaseChatModel`` class or factory, called with
    ``options`` as keyword arguments. With ``source=PROVIDER``, ``target`` is an
    ``init_chat_model`` string ``"provider:model"`` (``"openai:gpt-4.1"``; the provider's
    LangChain package must be installed on the workers), built with ``options``.
    """

    target: str
    options: Mapping[str, JsonValue] = field(default_factory=dict)
    source: ModelSource = ModelSource.IMPORT_PATH

    def __post_init__(self) -> None:
        if self.source is ModelSource.IMPORT_PATH:
            _require_target("model", self.target)
        else:
            provider, _, model = self.target.partition(":")
            if not provider or not model:
                raise ProfileError(f"model {self.target!r} must be 'provider:model'")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"target": self.target, "options": dict(self.options)}
        if self.source is not ModelSource.IMPORT_PATH:
            data["source"] = self.source.value
        return data


def _require_target(kind: str, target: str) -> None:
    module, _, attribute = target.partition(":")
    if not module or not attribute:
        raise ProfileError(f"{kind} target {target!r} must be 'package.module:Attribute'")


class ToolApproval(StrEnum):
    """Whether a tool call needs the caller's approval before its effect."""

    NONE = "none"
    REQUIRED = "required"


class ToolDelivery(StrEnum):
    """How often a tool call may run when the worker running it is lost mid-call.

    A tool runs inside a worker; a worker can die (SIGKILL, OOM, a lost machine) after the
    tool began its effect and before its result was checkpointed. The task then resumes
    on another worker from its last checkpoint, which is before that call.
    """

    AT_LEAST_ONCE = "at_least_once"
    """Run the call again (as attempt 2, 3, ...). The tool receives an idempotency key
    that is the same on every attempt of that call (``workers.tools.idempotency_key``)
    and must deduplicate its effect by it (as a Temporal activity does)."""
    AT_MOST_ONCE = "at_most_once"
    """Never start a call again once an attempt of it began: the model receives a tool
    result saying its outcome is unknown because the worker running it was lost, and the
    caller sees the call failed with a ``Warning``."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the agent may call.

    ``target`` is an import path ``"package.module:attribute"`` of a LangChain ``BaseTool``
    (whose ``name`` must equal ``name``) or of a plain (sync or async) callable, which the
    worker wraps as a structured tool named ``name`` with ``description``. ``effect`` says
    what a call changes, in words shown to an approver. ``session_grant``, when set,
    describes the enforced scope of an approve-for-session grant; ``None`` means
    approve-for-session is not offered for this tool. ``delivery`` says what happens to a
    call whose worker was lost mid-call (:class:`ToolDelivery`).
    """

    name: str
    target: str
    description: str
    effect: str = "none: reads only"
    approval: ToolApproval = ToolApproval.NONE
    session_grant: str | None = None
    delivery: ToolDelivery = ToolDelivery.AT_LEAST_ONCE

    def __post_init__(self) -> None:
        require_valid_id("tool", self.name)
        _require_target("tool", self.target)
        if not self.description.strip():
            raise ProfileError(f"tool {self.name!r} needs a description (the model reads it)")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "target": self.target,
            "description": self.description,
            "effect": self.effect,
            "approval": self.approval.value,
            "session_grant": self.session_grant,
        }
        if self.delivery is not ToolDelivery.AT_LEAST_ONCE:
            # Only when not the default: the profile digests of existing profiles stay.
            data["delivery"] = self.delivery.value
        return data


@dataclass(frozen=True, slots=True)
class Safeguards:
    """Bounds on one task's run (seed 001); ``None`` turns a safeguard off.

    ``max_steps``: model calls per task; the run that would need one more ends
    ``Completed(stop_reason=ITERATION_LIMIT)``. ``loop_window`` / ``loop_repeats``: a tool
    action (tool name and canonical arguments) seen ``loop_repeats`` times among the task's
    last ``loop_window`` actions ends ``Completed(stop_reason=LOOP_DETECTED)`` before it runs
    again. ``token_budget``: measured tokens per task; a model call that takes the task past
    it ends ``Failed(BUDGET_EXCEEDED)``.
    """

    max_steps: int | None = 25
    loop_window: int = 6
    loop_repeats: int | None = 3
    token_budget: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_steps", "loop_repeats", "token_budget"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ProfileError(f"safeguard {name} must be at least 1 (or None for off)")
        if self.loop_window < 1:
            raise ProfileError("safeguard loop_window must be at least 1")
        if self.loop_repeats is not None and self.loop_repeats > self.loop_window:
            raise ProfileError("safeguard loop_repeats cannot exceed loop_window")

    def to_json(self) -> dict[str, Any]:
        return {
            "max_steps": self.max_steps,
            "loop_window": self.loop_window,
            "loop_repeats": self.loop_repeats,
            "token_budget": self.token_budget,
        }


_DEFAULT_SAFEGUARDS = Safeguards()


@dataclass(frozen=True, slots=True)
class AgentProfile:
    """A deployment's declaration of one kind of agent."""

    name: str
    model: ModelSpec
    model_id: str | None = None
    cancellation: CancellationSemantics = CancellationSemantics.UNCONFIRMED
    retention: ContextRetentionDisposition = ContextRetentionDisposition.UNKNOWN
    history_visibility: UserHistoryVisibility = UserHistoryVisibility.UNKNOWN
    description: str = ""
    tools: tuple[ToolSpec, ...] = ()
    safeguards: Safeguards = _DEFAULT_SAFEGUARDS
    pipeline: Pipeline | None = None
    questions: bool = False
    """Whether the agent gets the built-in question tool (``ask_caller``)."""
    queue: str | None = None
    """The broker queue its tasks run on (``None``: the deployment's ``AHP_QUEUE``); only
    workers serving that queue run them (``wire.queues``). Routing, not behaviour: it is
    not part of the digest, so moving a profile to another queue keeps its sessions."""
    _digest: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        require_valid_id("profile", self.name)
        if self.queue is not None:
            require_queue_name(self.queue, what=f"profile {self.name!r}: queue")
        object.__setattr__(self, "tools", tuple(self.tools))
        names = [tool.name for tool in self.tools]
        if len(set(names)) != len(names):
            raise ProfileError(f"profile {self.name!r}: tool names must be unique")
        if self.pipeline is not None:
            unknown = self.pipeline.unknown_tools(names)
            if unknown:
                raise ProfileError(
                    f"profile {self.name!r}: the pipeline names tools the profile does not "
                    f"declare: {', '.join(unknown)}"
                )

    def tool(self, name: str) -> ToolSpec | None:
        return next((tool for tool in self.tools if tool.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """Everything that changes behaviour. The agent features appear only when they
        differ from their defaults, so a profile that declares none keeps its digest."""
        data: dict[str, Any] = {
            "name": self.name,
            "model": self.model.to_json(),
            "model_id": self.model_id,
            "cancellation": self.cancellation.value,
            "retention": self.retention.value,
            "history_visibility": self.history_visibility.value,
        }
        if self.tools:
            data["tools"] = [tool.to_json() for tool in self.tools]
        if self.safeguards != _DEFAULT_SAFEGUARDS:
            data["safeguards"] = self.safeguards.to_json()
        if self.pipeline is not None:
            data["pipeline"] = self.pipeline.to_json()
        if self.questions:
            data["questions"] = True
        return data

    @property
    def digest(self) -> str:
        """A stable digest of everything that changes behaviour (not the description),
        computed once: workers compare it on every task."""
        if not self._digest:
            canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
            object.__setattr__(self, "_digest", hashlib.sha256(canonical.encode()).hexdigest()[:32])
        return self._digest


def load_profiles(path: str) -> Mapping[str, AgentProfile]:
    """Load a registry ``"package.module:NAME"`` that maps names to :class:`AgentProfile`."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ProfileError(f"profile registry {path!r} must be 'package.module:NAME'")
    try:
        module = importlib.import_module(module_name)
        registry = getattr(module, attribute)
    except (ImportError, AttributeError) as error:
        raise ProfileError(f"cannot load profile registry {path!r}: {error}") from error
    if not isinstance(registry, Mapping):
        raise ProfileError(f"profile registry {path!r} is not a mapping")
    profiles: dict[str, AgentProfile] = {}
    for name, profile in registry.items():
        if not isinstance(profile, AgentProfile) or profile.name != name:
            raise ProfileError(f"registry entry {name!r} is not an AgentProfile named {name!r}")
        profiles[name] = profile
    return MappingProxyType(profiles)


def resolve_profile(profiles: Mapping[str, AgentProfile], name: str) -> AgentProfile:
    if not name.strip():
        raise ProfileError("a blank profile name names no profile; give one, or omit it")
    try:
        return profiles[name]
    except KeyError:
        known = ", ".join(sorted(profiles)) or "none"
        raise ProfileError(f"unknown profile {name!r}; known profiles: {known}") from None
