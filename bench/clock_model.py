"""The chat model of the event and cancel latency scenarios (``bench/latency_throughput.py``).

It runs inside the workers and streams ``chunks`` pieces ``interval`` seconds apart (the
first one at once). Each piece is ``[<index>@<ns>]``: its position and the wall clock
``time.time_ns()`` read in the worker right before the piece is yielded. The caller,
on the same machine (same ``CLOCK_REALTIME``), subtracts the stamp from its own clock at
receipt: the worker-to-caller latency of that event, with no clock skew to correct.

The pieces are spaced a few milliseconds apart so that batching in the event path
cannot hide behind a burst: every piece is a separate event the caller must receive.
With many pieces and a long interval (profile ``clock-slow``) it is a slow stream that
runs until it is cancelled, for the cancel latency scenario.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGenerationChunk

from bench.streaming_model import AsyncStreamingChatModel

STAMP = re.compile(r"\[(\d+)@(\d+)\]")
"""One piece of the answer: ``[<index>@<time.time_ns() in the worker>]``."""


def stamps(text: str) -> list[tuple[int, int]]:
    """The ``(index, ns)`` pairs in ``text``, in order (one delta may carry several, should
    the event path ever merge deltas)."""
    return [(int(index), int(ns)) for index, ns in STAMP.findall(text)]


class ClockChatModel(AsyncStreamingChatModel):
    """Streams ``chunks`` clock-stamped pieces, ``interval`` seconds apart."""

    chunks: int = 20
    interval: float = 0.005

    @property
    def _llm_type(self) -> str:
        return "ahp-bench-clock"

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        prompt = sum(len(message.text.split()) for message in messages)
        for index in range(self.chunks):
            if index:
                await asyncio.sleep(self.interval)
            last = index == self.chunks - 1
            usage = (
                UsageMetadata(
                    input_tokens=prompt,
                    output_tokens=self.chunks,
                    total_tokens=prompt + self.chunks,
                )
                if last
                else None
            )
            # The stamp is the last thing read before the piece leaves the model.
            text = f"[{index}@{time.time_ns()}]"
            yield ChatGenerationChunk(message=AIMessageChunk(content=text, usage_metadata=usage))


__all__ = ["STAMP", "ClockChatModel", "stamps"]
