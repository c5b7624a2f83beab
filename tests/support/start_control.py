"""``StartControl`` at the real publish boundary: the harness's publisher seam.

``accept`` publishes through the real :class:`TaskPublisher` to the real broker.
``reject_before_delivery`` publishes through a real ``TaskPublisher`` whose broker URL
points to a port nobody listens on, so the failure is the genuine connection refusal the
harness must classify. ``lose_acceptance_acknowledgement(True)`` publishes for real and
then loses the acknowledgement (the connection resets), ``(False)`` loses the message in
flight; both leave its fate unknown to the harness. Each fault applies to the next
submission only. Accepted starts are the publishes the broker really acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_harness_protocol import SessionId, UnconfirmedStart

from harness.transport import PublishError, PublishFate, TaskPublisher, classify
from wire.settings import Settings

from .delivery import DeliveryControl, DeliveryMode, closed_port


@dataclass
class StartBoundary(DeliveryControl):
    """The shared record of every publish a fixture's harnesses attempted."""

    accepted: int = 0
    submitted: list[UnconfirmedStart] = field(default_factory=list)
    accepted_ids: list[str] = field(default_factory=list)

    # -- StartControl -----------------------------------------------------------------
    def observed_accepted_starts(self) -> int:
        return self.accepted

    def never_accepted(self) -> list[str]:
        """Task ids of submissions the broker never received (refused or lost in flight)."""
        return [s.request_id for s in self.submitted if s.request_id not in self.accepted_ids]

    def publisher(self, settings: Settings) -> ControlledPublisher:
        return ControlledPublisher(self, settings)


class ControlledPublisher:
    def __init__(self, boundary: StartBoundary, settings: Settings) -> None:
        self._boundary = boundary
        self._real = TaskPublisher(settings)
        unreachable = f"redis://127.0.0.1:{closed_port()}/0"
        self._unreachable = TaskPublisher(settings.model_copy(update={"broker_url": unreachable}))

    async def publish(
        self, task_id: str, session_id: str | None = None, queue: str | None = None
    ) -> None:
        boundary = self._boundary
        boundary.submissions += 1
        boundary.submitted.append(UnconfirmedStart(SessionId(session_id or "?"), task_id))
        # A fault applies to the next submission only: one lost acknowledgement, one
        # refused connection. Later submissions are accepted unless a fault is set again.
        mode, boundary.mode = boundary.mode, DeliveryMode.ACCEPT
        if mode is DeliveryMode.REJECT:
            await self._unreachable.publish(task_id, session_id)
            raise AssertionError("a publish to a closed port succeeded")
        if mode is DeliveryMode.LOSE_BEFORE_ACCEPTANCE:
            error: OSError = TimeoutError("publish timed out before the broker answered")
            raise PublishError(classify(error), error)
        await self._real.publish(task_id, session_id, queue)
        boundary.accepted += 1
        boundary.accepted_ids.append(task_id)
        if mode is DeliveryMode.LOSE_AFTER_ACCEPTANCE:
            error = ConnectionResetError("connection reset before the acknowledgement arrived")
            assert classify(error) is PublishFate.UNKNOWN
            raise PublishError(classify(error), error)

    async def revoke(self, task_id: str) -> None:
        await self._real.revoke(task_id)

    def close(self) -> None:
        self._real.close()
        self._unreachable.close()
