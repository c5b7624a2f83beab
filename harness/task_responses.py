"""How a task handle answers its task's interactions: checked here, delivered once.

A response is checked against the request first (nothing is sent for a wrong one), then
delivered by one atomic script (``harness.responses``) whatever happens to the caller
that sent it: the delivery belongs to the handle, and a handle sends at most one
response per interaction. A delivery whose fate is unknown clears the interaction here
(``RESPONSE_UNCONFIRMED``) and is never sent again. A response that makes the task due
publishes its resume; a cancelling one settles a paused task and starts the one queued
behind it.
"""

from __future__ import annotations

import asyncio
import logging

from agent_harness_protocol import (
    ApprovalDecision,
    ApprovalResponse,
    ClearReason,
    HarnessTransportError,
    InteractionId,
    InteractionResolved,
    InteractionResponse,
    InteractionResponseUnconfirmedError,
    Responded,
    SessionId,
    TaskId,
    TaskOutcome,
    UnconfirmedResponse,
)
from redis.exceptions import RedisError

from wire.codec import dumps, loads, outcome_from_json
from wire.event_codec import event_to_entry
from wire.interactions import InteractionPayload, resolution_to_json
from wire.store import RespondResult
from wire.tracing_context import active

from . import spans
from .errors import InteractionClosedError, UnknownInteractionError
from .redis_errors import Fate, fate, reported
from .runtime import CallerRuntime
from .task_interactions import TaskInteractions
from .task_stream import remote_cause

log = logging.getLogger(__name__)


class TaskResponder:
    """The responding part of ``harness.task.CeleryTask`` (see the module docstring); the
    handle declares the state it shares here."""

    _runtime: CallerRuntime
    _id: TaskId
    _session_id: SessionId
    _interactions: TaskInteractions
    _cancel_recorded: bool

    def _finish(self, outcome: TaskOutcome) -> None:
        raise NotImplementedError

    def _settle_awaiting(self) -> None:
        raise NotImplementedError

    def _clear_pending(self, reason: ClearReason) -> None:
        raise NotImplementedError

    async def _publish_promoted(self, task_id: str) -> None:
        raise NotImplementedError

    async def respond(self, interaction_id: InteractionId, response: InteractionResponse) -> None:
        """Answer a pending approval or question; its task resumes on any worker.

        The response is checked here first (nothing is sent for a wrong one), then
        delivered once by one atomic script. A handle sends at most one response per
        interaction, also when the caller of the first one was cancelled meanwhile (that
        delivery goes on).

        Raises:
            ValueError: the wrong kind of response, or a decision the request does not
                offer; nothing was sent, the interaction stays pending.
            UnknownInteractionError: (a ``LookupError`` and ``ValueError``) the task raised no such
                interaction.
            InteractionClosedError: (a ``RuntimeError``) it is no longer pending here: a
                response was already submitted, or it was resolved or cleared.
            HarnessTransportError: the response surely did not reach Redis; it stays
                pending, respond again.
            InteractionResponseUnconfirmedError: whether the response was applied is
                unknown (its reply was lost), or the task was cancelled or ended before
                it arrived; the interaction is cleared here (``RESPONSE_UNCONFIRMED``)
                and no second response can duplicate an effect.
        """
        key = interaction_id.value
        self._interactions.check_open(key)
        payload = self._interactions.raised(key) or await self._look_up(key)
        payload.check(response)
        self._interactions.submit(key)  # refused if decided while looking it up
        # The delivery belongs to the handle, not to this caller: cancelling the caller
        # leaves it running (and the gate closed).
        delivery = self._runtime.spawn(self._deliver(payload, response))
        await asyncio.shield(delivery)

    async def _look_up(self, key: str) -> InteractionPayload:
        """An interaction this handle's reader has not seen yet, from Redis."""
        with reported("the interaction could not be read"):
            raised, resolved = await self._runtime.store.interactions(self._id.value)
        if key not in raised:
            raise UnknownInteractionError(self._id.value, key)
        if key in resolved:
            raise InteractionClosedError(self._id.value, key, "it is resolved")
        payload = InteractionPayload.from_json(raised[key])
        self._interactions.remember(key, payload)
        return payload

    async def _deliver(self, payload: InteractionPayload, response: InteractionResponse) -> None:
        key = payload.interaction_id
        resolution = Responded(response)
        event = InteractionResolved(self._id, InteractionId(key), resolution)
        decision = response.decision if isinstance(response, ApprovalResponse) else None
        self._interactions.delivering(key)
        try:
            await self._deliver_once(payload, response, event, decision)
        finally:
            self._interactions.delivered(key)

    async def _deliver_once(
        self,
        payload: InteractionPayload,
        response: InteractionResponse,
        event: InteractionResolved,
        decision: ApprovalDecision | None,
    ) -> None:
        key = payload.interaction_id
        resolution = event.resolution
        try:
            result, detail, settled, promoted = await self._runtime.responder.respond(
                self._session_id.value,
                self._id.value,
                key,
                dumps(resolution_to_json(resolution)),
                event_to_entry(event)[1],
                grant=decision is ApprovalDecision.APPROVE_FOR_SESSION,
                cancels=decision is ApprovalDecision.CANCEL,
            )
        except RedisError as error:
            if fate(error) is Fate.REFUSED:
                self._interactions.not_sent(key)  # surely not delivered: still pending
                raise HarnessTransportError(
                    f"the response to interaction {key} did not reach Redis "
                    f"({type(error).__name__}: {error}); it is still pending"
                ) from error
            self._clear(key, ClearReason.RESPONSE_UNCONFIRMED)
            raise InteractionResponseUnconfirmedError(
                UnconfirmedResponse(self._id, InteractionId(key)),
                f"whether the response to interaction {key} was applied is unknown "
                f"({type(error).__name__}: {error}); it is not sent again",
            ) from error
        if result is RespondResult.OK:
            self._interactions.answered(key)
            self._settle_awaiting()
            if decision is ApprovalDecision.CANCEL:
                # The script recorded the cancellation and settled a paused task: this
                # handle's events carry the answer before the terminal event.
                self._cancel_recorded = True
                self._interactions.resolve(event)
                self._clear_pending(ClearReason.CANCELLATION_REQUESTED)
                if settled:
                    self._finish(outcome_from_json(loads(settled), remote_cause))
                if promoted:
                    self._runtime.spawn(self._publish_promoted(promoted))
            if detail == "1":
                await self._publish_resume()
            return
        self._interactions.answered(key)
        self._settle_awaiting()
        if result is RespondResult.RESOLVED:
            raise InteractionClosedError(self._id.value, key, "another response resolved it")
        if result is RespondResult.UNKNOWN:
            raise UnknownInteractionError(self._id.value, key)
        # Cancelled or settled before the response arrived: it was not applied. The
        # cancellation's own resolution (cleared) is what the events carry.
        raise InteractionResponseUnconfirmedError(
            UnconfirmedResponse(self._id, InteractionId(key)),
            f"the task was {'cancelled' if result is RespondResult.CANCELLED else 'settled'} "
            f"before the response to interaction {key} arrived; it was not applied",
        )

    async def _publish_resume(self) -> None:
        """The task is due: publish its resume run. A failure is logged: the workers'
        sweeper publishes it again (the task is in the starting set)."""
        try:
            if active():
                await spans.publish_in_task_trace(
                    self._runtime.store,
                    self._runtime.publisher,
                    self._id.value,
                    self._session_id.value,
                    "ahp.resume",
                )
                return
            queue = await self._runtime.store.task_queue(self._id.value)
            await self._runtime.publisher.publish(self._id.value, self._session_id.value, queue)
        except Exception as error:
            log.warning(
                "publishing the resume of task %s failed (the sweeper will): %s",
                self._id.value,
                error,
            )

    def _clear(self, key: str, reason: ClearReason) -> None:
        """Resolve ``key`` here as cleared, once, in this handle's events."""
        self._interactions.clear(key, reason)
        self._settle_awaiting()


__all__ = ["TaskResponder"]
