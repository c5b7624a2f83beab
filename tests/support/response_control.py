"""``ResponseControl`` at the real delivery boundary of a response: the respond script.

``accept`` runs the real ``respond.lua`` on the deployment's Redis.
``reject_before_delivery`` runs it through a client whose Redis URL points to a port nobody
listens on, so the failure is the genuine connection refusal the harness must classify.
``lose_acceptance_acknowledgement(True)`` runs it for real and then loses the reply (the
connection is closed by the server); ``(False)`` loses the request in flight (a read
timeout before Redis ran it). Each fault applies to the next submission only. Accepted
responses are the ones the real script recorded.

``hold_response`` keeps the next submission waiting at the boundary (already counted),
``await_response_submission`` waits until a submission arrived there, and
``release_response`` lets it go on to Redis.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from agent_harness_protocol import InteractionResponse, Responded
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wire.interactions import resolution_from_json
from wire.store import RecordStore, RespondResult

from .delivery import DeliveryControl, DeliveryMode, closed_port


@dataclass
class ResponseBoundary(DeliveryControl):
    """The shared record of every response delivery a fixture's harnesses attempted."""

    accepted: list[InteractionResponse] = field(default_factory=list)
    held: bool = False
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    # -- ResponseControl --------------------------------------------------------------
    def observed_accepted_responses(self) -> tuple[InteractionResponse, ...]:
        return tuple(self.accepted)

    # -- races ------------------------------------------------------------------------
    def hold_response(self) -> None:
        self.held = True
        self._arrived.clear()
        self._released.clear()

    async def await_response_submission(self) -> None:
        await self._arrived.wait()

    def release_response(self) -> None:
        self.held = False
        self._released.set()

    def responder(self, store: RecordStore) -> ControlledResponder:
        return ControlledResponder(self, store)


class ControlledResponder:
    def __init__(self, boundary: ResponseBoundary, store: RecordStore) -> None:
        self._boundary = boundary
        self._real = store

    async def respond(
        self,
        session_id: str,
        task_id: str,
        interaction_id: str,
        resolution_json: str,
        event_json: str,
        *,
        grant: bool,
        cancels: bool,
    ) -> tuple[RespondResult, str, str, str]:
        boundary = self._boundary
        boundary.submissions += 1
        mode, boundary.mode = boundary.mode, DeliveryMode.ACCEPT
        if boundary.held:
            boundary._arrived.set()
            await boundary._released.wait()
        arguments = (session_id, task_id, interaction_id, resolution_json, event_json)
        if mode is DeliveryMode.REJECT:
            url = f"redis://127.0.0.1:{closed_port()}/0"
            unreachable = RecordStore(Redis.from_url(url, decode_responses=True), self._real.keys)
            try:
                await unreachable.respond(*arguments, grant=grant, cancels=cancels)
            finally:
                await unreachable.redis.aclose()
            raise AssertionError("a script on a closed port ran")
        if mode is DeliveryMode.LOSE_BEFORE_ACCEPTANCE:
            raise RedisTimeoutError("Timeout reading from socket")
        result = await self._real.respond(*arguments, grant=grant, cancels=cancels)
        if result[0] is RespondResult.OK:
            resolution = resolution_from_json(json.loads(resolution_json))
            assert isinstance(resolution, Responded)
            boundary.accepted.append(resolution.response)
        if mode is DeliveryMode.LOSE_AFTER_ACCEPTANCE:
            raise RedisConnectionError("Connection closed by server.")
        return result
