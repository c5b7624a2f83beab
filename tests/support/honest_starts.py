"""What the honest-start tests share (``tests/test_honest_starts*.py``): a request, which
starts reached the model, and the real publisher with a fault injected around a publish."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from uuid import uuid4

from agent_harness_protocol import TaskRequest, TextInput

from harness.transport import PublishError, PublishFate, TaskPublisher
from wire.settings import Settings

from .boundary import ModelBoundary


def text_request(value: str) -> TaskRequest:
    return TaskRequest(TextInput(value))


def ran(boundary: ModelBoundary, text: str) -> list[dict[str, object]]:
    """Model calls whose input held ``text`` (the work of that start reached the model)."""
    return [call for call in boundary.calls() if text in call["texts"]]  # type: ignore[operator]


class FaultingPublisher:
    """The real publisher, with a fault injected around the next publish: ``before`` runs
    first, ``after`` once the publish returned or failed, and ``lose_acknowledgement``
    then reports its fate unknown although it went out.

    ``side_queue`` publishes every message for real to a queue no worker consumes and
    loses every acknowledgement: the message reached the broker, the harness cannot know
    it; a test later moves it into the deployment's queue (a delivery that came late)."""

    def __init__(self, settings: Settings, *, side_queue: bool = False) -> None:
        self.queue = f"{settings.queue}.late.{uuid4().hex[:6]}" if side_queue else settings.queue
        self._real = TaskPublisher(settings.model_copy(update={"queue": self.queue}))
        self._always_lose = side_queue
        self.before: Callable[[], object] | None = None
        self.after: Callable[[], object] | None = None
        self.lose_acknowledgement = False

    async def publish(
        self, task_id: str, session_id: str | None = None, queue: str | None = None
    ) -> None:
        before, after = self.before, self.after
        lose = self.lose_acknowledgement or self._always_lose
        self.before, self.after, self.lose_acknowledgement = None, None, False
        if before is not None:
            await asyncio.to_thread(before)
        try:
            # The side queue takes every message, whichever queue the caller names (a
            # start names its profile's queue since queues by profile).
            await self._real.publish(
                task_id, session_id, self.queue if self._always_lose else queue
            )
        finally:
            if after is not None:
                await asyncio.to_thread(after)
        if lose:
            error = ConnectionResetError("connection reset before the acknowledgement arrived")
            raise PublishError(PublishFate.UNKNOWN, error)

    async def revoke(self, task_id: str) -> None:
        await self._real.revoke(task_id)

    async def aclose(self) -> None:
        await self._real.aclose()

    def close(self) -> None:
        self._real.close()


__all__ = ["FaultingPublisher", "ran", "text_request"]
