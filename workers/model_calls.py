"""The model call each run is in, and the step-boundary gate each run checks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from .errors import ModelCallCancelledError

T = TypeVar("T")

Gate = Callable[[], Awaitable[None]]
"""A run's step-boundary check: returns, or raises to stop the run before the step."""


class ModelCalls:
    """The model call each run is in, so cancellation can be delivered to exactly it.

    Cancelling the model call (rather than the whole graph run) lets a model that
    finishes anyway complete its turn: completion then wins the race against cancel.

    Each run may register a gate, awaited before its model is invoked and before each
    tool effect: a recorded cancellation stops the run there, whether or not a
    ``CancelledError`` reached it.
    A call counts as started only once the chat model's stream is first advanced, the
    first moment the provider can be reached.
    """

    def __init__(self) -> None:
        self._calls: dict[str, asyncio.Task[Any]] = {}
        self._started: set[str] = set()
        self._gates: dict[str, Gate] = {}

    def guard(self, key: str, gate: Gate) -> None:
        """Check ``gate`` before every step of run ``key`` (until :meth:`forget`)."""
        self._gates[key] = gate

    async def before_call(self, key: str) -> None:
        """The step boundary: before each model call and before each tool effect."""
        gate = self._gates.get(key)
        if gate is not None:
            await gate()

    async def run(self, key: str, call: Coroutine[Any, Any, T]) -> T:
        task = asyncio.create_task(call)
        self._calls[key] = task
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                # The delivered cancellation ended the model call; end the run with it.
                raise ModelCallCancelledError(key) from None
            # The run itself was cancelled (its worker stops, its lease was lost): cancel
            # the model call and end the run only once the call has ended, so a run seen
            # ended never leaves its model call behind (a hand-back would let another
            # worker call the model of this session while this call still runs). A call
            # that disregards the cancellation keeps the run going: the caller's budget
            # decides what that means.
            task.cancel()
            await asyncio.wait({task})
            raise
        finally:
            if self._calls.get(key) is task:
                del self._calls[key]

    def mark_started(self, key: str) -> None:
        self._started.add(key)

    def cancel(self, key: str) -> bool:
        """Cancel the run's model call if one is in progress; whether one was."""
        task = self._calls.get(key)
        if task is None or task.done():
            return False
        task.cancel()
        return True

    def started(self, key: str) -> bool:
        return key in self._started

    def forget(self, key: str) -> None:
        self._started.discard(key)
        self._gates.pop(key, None)
