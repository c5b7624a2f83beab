"""The interactions of one task as its handle reports them.

Each interaction is raised once in a handle's events and resolved at most once there: a
resolution this handle made locally (a cancellation clearing it, a response whose fate
is unknown) is not repeated when the stream brings the durable one, and a resolution the
stream brings while this handle's own response is in flight is held back until that
delivery's fate decides which of the two the handle reports. A handle sends at most one
response per interaction.
"""

from __future__ import annotations

from agent_harness_protocol import (
    Cleared,
    ClearReason,
    InteractionId,
    InteractionRequest,
    InteractionResolved,
    Responded,
    TaskEvent,
    TaskId,
)

from wire.interactions import InteractionPayload

from .errors import InteractionClosedError
from .fanout import BoundedFanout


class TaskInteractions:
    """One handle's ledger of its task's interactions (see the module docstring)."""

    def __init__(self, task_id: TaskId, events: BoundedFanout[TaskEvent]) -> None:
        self._task_id = task_id
        self._events = events
        self._raised: dict[str, InteractionPayload] = {}
        """Every interaction this handle saw raised, by id."""
        self._pending: dict[str, InteractionRequest] = {}
        self._resolved: set[str] = set()
        """Interactions whose resolution this handle's events carried (at most once each)."""
        self._submitted: set[str] = set()
        """Interactions this handle sent a response to: never sent twice."""
        self._delivering: dict[str, InteractionResolved | None] = {}
        """Responses in flight, with the resolution the stream brought meanwhile: held
        back until the delivery's fate decides which resolution this handle reports."""

    @property
    def pending(self) -> tuple[InteractionRequest, ...]:
        return tuple(self._pending.values())

    def any_pending(self) -> bool:
        return bool(self._pending)

    def raised(self, key: str) -> InteractionPayload | None:
        return self._raised.get(key)

    # -- from the stream ----------------------------------------------------------------
    def raise_(self, payload: InteractionPayload) -> tuple[InteractionRequest, bool] | None:
        """An interaction the stream raised: its request and whether it is pending now,
        for the handle to report (``None``: it was raised before, reported then)."""
        key = payload.interaction_id
        if key in self._raised:
            return None
        self._raised[key] = payload
        request = payload.to_request()
        pending = key not in self._resolved and key not in self._submitted
        if pending:
            self._pending[key] = request
        return request, pending

    def resolved_by_stream(self, event: InteractionResolved) -> bool:
        """A resolution the stream brought; whether the handle reports it now."""
        key = event.interaction_id.value
        self._pending.pop(key, None)
        if key in self._resolved:
            return False  # this handle's events carried its resolution already
        if key in self._delivering and isinstance(event.resolution, Responded):
            # Our response is in flight: its fate decides what this handle reports
            # (a lost reply reports it cleared as unconfirmed, although it landed).
            self._delivering[key] = event
            return False
        self._resolved.add(key)
        return True

    # -- this handle's own responses ----------------------------------------------------
    def check_open(self, key: str) -> None:
        """Refuse a response to an interaction this handle answered or saw resolved."""
        if key in self._submitted:
            raise InteractionClosedError(
                self._task_id.value, key, "a response was already submitted"
            )
        if key in self._resolved:
            raise InteractionClosedError(self._task_id.value, key, "it is resolved")

    def remember(self, key: str, payload: InteractionPayload) -> None:
        """An interaction looked up in Redis before the stream brought it."""
        self._raised.setdefault(key, payload)

    def submit(self, key: str) -> None:
        """This handle sends its one response to ``key`` (refused if decided meanwhile)."""
        if key in self._submitted or key in self._resolved:
            raise InteractionClosedError(self._task_id.value, key, "it is no longer pending")
        self._submitted.add(key)

    def not_sent(self, key: str) -> None:
        """The response surely did not reach Redis: ``key`` is still pending."""
        self._submitted.discard(key)

    def delivering(self, key: str) -> None:
        self._delivering[key] = None

    def delivered(self, key: str) -> None:
        """The delivery ended: report the resolution the stream brought meanwhile, if no
        other was reported."""
        held = self._delivering.pop(key, None)
        if held is not None and key not in self._resolved:
            self._resolved.add(key)
            self._events.publish(held)

    def answered(self, key: str) -> None:
        """The response was applied or refused: ``key`` is no longer pending."""
        self._pending.pop(key, None)

    def resolve(self, event: InteractionResolved) -> None:
        """Report ``event`` as this handle's resolution of its interaction, once."""
        key = event.interaction_id.value
        if key not in self._resolved:
            self._resolved.add(key)
            self._events.publish(event)

    # -- clearing -----------------------------------------------------------------------
    def clear(self, key: str, reason: ClearReason) -> None:
        """Resolve ``key`` here as cleared, once, in this handle's events."""
        self._pending.pop(key, None)
        if key in self._raised:
            self.resolve(InteractionResolved(self._task_id, InteractionId(key), Cleared(reason)))

    def clear_pending(self, reason: ClearReason) -> None:
        for key in tuple(self._pending):
            self.clear(key, reason)

    def task_ended(self) -> None:
        """The task settled: report the held resolutions, clear what is still pending."""
        for key in tuple(self._delivering):
            held = self._delivering[key]
            if held is not None and key not in self._resolved:
                self._resolved.add(key)
                self._events.publish(held)
        self.clear_pending(ClearReason.TASK_ENDED)


__all__ = ["TaskInteractions"]
