"""Completion validators of the test pipelines (``PipelineStep.validator``); they run in
the worker, inside the steering middleware."""

from __future__ import annotations

from langchain_core.messages import ToolMessage

from workers.steering import StepCompletion

REJECTION = "record an effect in this step first"


def requires_recorded_effect(completion: StepCompletion) -> str | None:
    """The step may complete only once ``record_effect`` ran (successfully) in it."""
    for message in completion.step_messages:
        if (
            isinstance(message, ToolMessage)
            and message.name == "record_effect"
            and message.status != "error"
        ):
            return None
    return REJECTION


async def at_least_two_items(completion: StepCompletion) -> str | None:
    """An async validator: two ``record_effect`` results in the step."""
    done = sum(
        isinstance(message, ToolMessage) and message.name == "record_effect"
        for message in completion.step_messages
    )
    return None if done >= 2 else f"only {done} item(s) recorded; record two"
