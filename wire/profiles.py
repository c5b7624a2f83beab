"""Agent profiles: the one declaration that callers and workers both load.

A profile names the chat model a worker builds (by import path, never by a pickled
object), the model identity admitted for ``SessionSpec.model``, what cancelling the model
coroutine proves, and the disposition facts the harness cannot observe. Callers derive
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


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """How a worker builds the chat model.

    ``target`` is an import path ``"package.module:Attribute"`` of a ``BaseChatModel``
    class or factory, called with ``options`` as keyword arguments.
    """

    target: str
    options: Mapping[str, JsonValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        module, _, attribute = self.target.partition(":")
        if not module or not attribute:
            raise ProfileError(f"model target {self.target!r} must be 'package.module:Attribute'")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))


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
    pipeline: Pipeline | None = None
    """An ordered task pipeline (seed 002) the agent works through; see wire/pipelines.py."""

    def __post_init__(self) -> None:
        require_valid_id("profile", self.name)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "model": {"target": self.model.target, "options": dict(self.model.options)},
            "model_id": self.model_id,
            "cancellation": self.cancellation.value,
            "retention": self.retention.value,
            "history_visibility": self.history_visibility.value,
        }
        # Omitted when absent, so a profile without one keeps the digest it had.
        if self.pipeline is not None:
            data["pipeline"] = self.pipeline.to_json()
        return data

    @property
    def digest(self) -> str:
        """A stable digest of everything that changes behaviour (not the description)."""
        canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]


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
