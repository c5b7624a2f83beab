"""The test side of the controlled model: observations read from what it received."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import uuid4

from redis import Redis

from .controlled_model import (
    ABORT,
    CALLS,
    CANCELLATIONS,
    CANCELLED_TASKS,
    HELD,
    IN_FLIGHT,
    OVERLAPS,
    PREFIX,
    SCOPE,
    deaf_key,
    live_members,
    scope_script_key,
    script_key,
)
from .tools import EFFECTS


class ModelBoundary:
    """``RuntimeObservation`` over the calls the controlled model recorded in the worker.

    Each boundary has its own scope. Sessions created by a harness given
    :attr:`run_metadata` carry the scope into their runs, and the controlled model stamps
    every call with it: such a boundary sees only its own sessions' calls, never a call
    left over from another test (a late republish, a resumed run). Without it, a
    boundary sees the unscoped calls made after it was opened. Tests run one at a time
    and each boundary waits at exit until no model call is still in flight.
    """

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self.scope = uuid4().hex
        self._strict = False
        for pattern in ("script:*", "cursor:*"):
            for key in self._redis.scan_iter(PREFIX + pattern):
                self._redis.delete(key)
        self._redis.delete(HELD, ABORT)
        self._start = int(self._redis.llen(CALLS))
        self._effects_start = int(self._redis.llen(EFFECTS))
        self._cancellations_at_start = self.cancellations_total()
        self._overlaps_at_start = int(self._redis.get(OVERLAPS) or 0)

    @property
    def run_metadata(self) -> Mapping[str, str]:
        """Run metadata for the harnesses of this test: their sessions' calls are this
        boundary's, and from now on only they are."""
        self._strict = True
        return {SCOPE: self.scope}

    def calls(self) -> list[dict[str, object]]:
        raw = self._redis.lrange(CALLS, self._start, -1)
        calls = [json.loads(item) for item in raw]
        accepted = {self.scope} if self._strict else {self.scope, ""}
        return [call for call in calls if call.get("scope", "") in accepted]

    @property
    def observed_contexts(self) -> Sequence[str]:
        return tuple("\n".join(call["texts"]) for call in self.calls())  # type: ignore[arg-type]

    @property
    def observed_text_values(self) -> Sequence[str]:
        return tuple(text for call in self.calls() for text in call["texts"])  # type: ignore[attr-defined]

    def calls_for(self, task_id: str) -> list[dict[str, object]]:
        return [call for call in self.calls() if call["task"] == task_id]

    def hold(self) -> None:
        self._redis.set(HELD, "1")

    def release(self) -> None:
        self._redis.delete(HELD)

    def in_flight(self) -> int:
        return len(live_members(set(self._redis.smembers(IN_FLIGHT))))

    def effects(self) -> list[dict[str, Any]]:
        """The tool effects this boundary's sessions performed, as recorded by the tools
        in the worker (``tests.support.tools``)."""
        raw = self._redis.lrange(EFFECTS, self._effects_start, -1)
        effects = [json.loads(item) for item in raw]
        accepted = {self.scope} if self._strict else {self.scope, ""}
        return [effect for effect in effects if effect.get("scope", "") in accepted]

    def effects_for(self, task_id: str) -> list[dict[str, Any]]:
        return [effect for effect in self.effects() if effect["task"] == task_id]

    def cancellations_total(self) -> int:
        return int(self._redis.get(CANCELLATIONS) or 0)

    @property
    def cancellations(self) -> int:
        return self.cancellations_total() - self._cancellations_at_start

    @property
    def overlaps(self) -> int:
        """Model calls that began while another call of the same session was running."""
        return int(self._redis.get(OVERLAPS) or 0) - self._overlaps_at_start

    def script(self, task_id: str, command: dict[str, object]) -> None:
        self._redis.rpush(script_key(task_id), json.dumps(command))

    def script_scope(self, command: dict[str, object]) -> None:
        """A command for every scripted call of this boundary (profile ``script_by_scope``)."""
        self._redis.rpush(scope_script_key(self.scope), json.dumps(command))

    def effect_count(self) -> int:
        """Calls of the approval-gated tool that ran, as the tool recorded them in the
        worker."""
        return sum(effect["tool"] == "guarded_effect" for effect in self.effects())

    def deafen(self) -> None:
        """From now on this boundary's model calls disregard cancellation."""
        self._redis.set(deaf_key(self.scope), "1")

    def was_cancelled(self, task_id: str) -> bool:
        """Whether a cancellation reached a model call of ``task_id``."""
        return bool(self._redis.sismember(CANCELLED_TASKS, task_id))

    def settle(self, timeout: float = 15.0) -> None:
        """Release held calls, end scripted ones a test left waiting, and wait until no
        model call is still running."""
        self.release()
        self._redis.set(ABORT, "1")
        try:
            deadline = time.monotonic() + timeout
            while self.in_flight() > 0:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.in_flight()} model calls still in flight")
                time.sleep(0.01)
        finally:
            self._redis.delete(ABORT, deaf_key(self.scope), scope_script_key(self.scope))
