"""Structured output on the worker: what the model is asked, and the judged outcome.

A task that requires structured output carries its schema in its input record. The run
adds the request for one JSON document conforming to it to the system prompt of every
model call of the turn (it is not stored in the thread: a later task of the session is
not bound by it). When the turn completes, the answer is judged against the schema here,
before the outcome is settled: the settled outcome carries ``StructuredOutput`` with the
real validation result, so every observer (``await_outcome``, ``events()``, ``state``,
the HTTP API, a webhook) sees the same judgment, and a resumed run that adopts a
checkpointed answer is judged the same way. An answer that does not conform is reported
``INVALID`` (with a ``Warning`` naming the problems), never passed on as valid.
"""

from __future__ import annotations

from dataclasses import replace

from agent_harness_protocol import (
    Completed,
    SchemaValidation,
    StructuredOutput,
    TaskOutcome,
    TextOutput,
    Warning,
    WarningKind,
)

from wire.event_codec import SEMANTIC, event_to_entry
from wire.structured_output import OutputSchema, judge_answer, output_instruction

from .event_sink import EventSink


def system_prompt(instructions: str | None, schema: OutputSchema | None) -> str | None:
    """The session's instructions, followed by the request for a conforming document."""
    if schema is None:
        return instructions
    request = output_instruction(schema)
    return request if instructions is None else f"{instructions}\n\n{request}"


def judged(
    outcome: TaskOutcome | None, schema: OutputSchema, sink: EventSink
) -> TaskOutcome | None:
    """``outcome`` with a completed text answer replaced by its judged structured output.

    Other outcomes are left as they are: an answer cut short (by cancellation, a failure
    or a safeguard) is a fragment, reported as incomplete text, not as a document."""
    if (
        not isinstance(outcome, Completed)
        or not isinstance(outcome.output, TextOutput)
        or not outcome.output.complete
    ):
        return outcome
    judgment = judge_answer(schema, outcome.output.text)
    if judgment.validation is not SchemaValidation.VALID:
        verdict = (
            "does not conform to"
            if judgment.validation is SchemaValidation.INVALID
            else "could not be validated against"
        )
        tag, payload = event_to_entry(
            Warning(
                outcome.task_id,
                WarningKind.OTHER,
                f"the answer {verdict} the required output schema: " + "; ".join(judgment.problems),
            )
        )
        sink.emit(SEMANTIC, tag, payload)
    output = StructuredOutput(judgment.json, judgment.validation)
    return replace(outcome, output=output)


__all__ = ["judged", "system_prompt"]
