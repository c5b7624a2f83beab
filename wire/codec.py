"""JSON encodings of the records that cross a process boundary.

Only JSON is ever written: records hold JSON strings (session specs, task inputs,
outcomes, usage, run metadata), and the task streams' entries are ``wire.event_codec``'s.
Decoding accepts only the known shapes, so no stored value can make either side
instantiate an arbitrary class.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from agent_harness_protocol import (
    AgentUsage,
    ApprovalRequirement,
    Cancelled,
    Completed,
    ContextRetentionRequirement,
    DiagnosticsRequirement,
    Failed,
    FailureKind,
    PersistenceRequirement,
    QuestionRequirement,
    SchemaValidation,
    SessionRequirements,
    SessionSpec,
    StopReason,
    StructuredOutput,
    StructuredOutputRequirement,
    TaskCancelled,
    TaskCompleted,
    TaskFailed,
    TaskId,
    TaskOutcome,
    TaskOutput,
    TaskRequest,
    TaskUnresolved,
    TerminalEvent,
    TextInput,
    TextOutput,
    Unresolved,
    UnresolvedReason,
    UserHistoryVisibilityRequirement,
)

from .errors import DecodeError
from .narrowing import NO_NARROWING, NarrowedSessionSpec, Narrowing, narrowing_of
from .usage import USAGE_FIELDS


def dumps(value: Any) -> str:
    """Compact JSON (every stream entry and record field): orjson, a fraction of the
    standard library's cost per event; the standard library for what orjson refuses
    (integers past 64 bits)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def loads(text: str | bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass  # what orjson refuses (NaN, integers past 64 bits) the standard library reads
    except TypeError as error:
        raise DecodeError(f"not JSON: {error}") from error
    try:
        return json.loads(text)
    except (ValueError, TypeError) as error:
        raise DecodeError(f"not JSON: {error}") from error


# -- usage ------------------------------------------------------------------------------


def usage_to_json(usage: AgentUsage) -> dict[str, int | None]:
    return {name: getattr(usage, name) for name in USAGE_FIELDS}


def usage_from_json(data: Any) -> AgentUsage:
    if not isinstance(data, Mapping):
        raise DecodeError("usage must be an object")
    values: dict[str, int | None] = {}
    for name in USAGE_FIELDS:
        value = data.get(name)
        if value is not None and not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise DecodeError(f"usage field {name} must be an integer or null")
        values[name] = value
    return AgentUsage(**values)


# -- outcomes ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RemoteCause:
    """What survives of a worker-side exception: its type, module and message."""

    type_name: str
    module: str
    message: str

    @classmethod
    def of(cls, error: BaseException) -> RemoteCause:
        kind = type(error)
        return cls(kind.__qualname__, kind.__module__, str(error))


def _output_to_json(output: TaskOutput | None) -> dict[str, Any] | None:
    """Text output ``{"text", "complete"}``; structured output ``{"json", "validation",
    "complete"}`` (the settle script writes partial text output in the first shape)."""
    if output is None:
        return None
    if isinstance(output, TextOutput):
        return {"text": output.text, "complete": output.complete}
    if isinstance(output, StructuredOutput):
        return {
            "json": output.json,
            "validation": output.validation.value,
            "complete": output.complete,
        }
    raise TypeError(f"unsupported output {type(output).__name__}")


def _output_from_json(data: Any) -> TextOutput | StructuredOutput | None:
    if data is None:
        return None
    if isinstance(data, Mapping) and isinstance(data.get("json"), str):
        try:
            validation = SchemaValidation(str(data.get("validation")))
        except ValueError:
            raise DecodeError("structured output needs a known validation") from None
        return StructuredOutput(data["json"], validation, bool(data.get("complete", True)))
    if not isinstance(data, Mapping) or not isinstance(data.get("text"), str):
        raise DecodeError("output must be an object with text or json")
    return TextOutput(data["text"], bool(data.get("complete", True)))


def outcome_to_json(outcome: TaskOutcome, cause: RemoteCause | None = None) -> dict[str, Any]:
    """Encode an outcome; ``session_usage`` is filled in by the settle script."""
    data: dict[str, Any] = {
        "task_id": outcome.task_id.value,
        "output": _output_to_json(outcome.output),
        "usage": usage_to_json(outcome.usage),
        "session_usage": None
        if outcome.session_usage is None
        else usage_to_json(outcome.session_usage),
    }
    if isinstance(outcome, Completed):
        data.update(type="completed", stop_reason=outcome.stop_reason.value)
    elif isinstance(outcome, Failed):
        data.update(type="failed", kind=outcome.kind.value, message=outcome.message)
        if cause is not None:
            data["cause"] = {
                "type": cause.type_name,
                "module": cause.module,
                "message": cause.message,
            }
    elif isinstance(outcome, Cancelled):
        data.update(type="cancelled")
    elif isinstance(outcome, Unresolved):
        data.update(type="unresolved", reason=outcome.reason.value, known=outcome.known)
    else:
        raise TypeError(f"unsupported outcome {type(outcome).__name__}")
    return data


def outcome_from_json(data: Any, cause_factory: Any = None) -> TaskOutcome:
    """Decode an outcome. ``cause_factory(RemoteCause)`` builds ``Failed.cause``."""
    if not isinstance(data, Mapping):
        raise DecodeError("outcome must be an object")
    try:
        task_id = TaskId(data["task_id"])
        output = _output_from_json(data.get("output"))
        usage = usage_from_json(data["usage"])
        raw_session = data.get("session_usage")
        session_usage = None if raw_session is None else usage_from_json(raw_session)
        kind = data["type"]
        if kind == "completed":
            return Completed(task_id, StopReason(data["stop_reason"]), output, usage, session_usage)
        if kind == "failed":
            cause = None
            raw_cause = data.get("cause")
            if raw_cause is not None and cause_factory is not None:
                cause = cause_factory(
                    RemoteCause(
                        str(raw_cause["type"]), str(raw_cause["module"]), str(raw_cause["message"])
                    )
                )
            return Failed(
                task_id,
                FailureKind(data["kind"]),
                str(data["message"]),
                cause,
                output,
                usage,
                session_usage,
            )
        if kind == "cancelled":
            return Cancelled(task_id, output, usage, session_usage)
        if kind == "unresolved":
            return Unresolved(
                task_id,
                UnresolvedReason(data["reason"]),
                str(data["known"]),
                output,
                usage,
                session_usage,
            )
    except (KeyError, ValueError, TypeError) as error:
        raise DecodeError(f"malformed outcome: {error}") from error
    raise DecodeError(f"unknown outcome type {kind!r}")


def terminal_event(outcome: TaskOutcome) -> TerminalEvent[Any]:
    if isinstance(outcome, Completed):
        return TaskCompleted(outcome.task_id, outcome)
    if isinstance(outcome, Failed):
        return TaskFailed(outcome.task_id, outcome)
    if isinstance(outcome, Cancelled):
        return TaskCancelled(outcome.task_id, outcome)
    if isinstance(outcome, Unresolved):
        return TaskUnresolved(outcome.task_id, outcome)
    raise TypeError(f"unsupported outcome {type(outcome).__name__}")


# -- session specs and task input ------------------------------------------------------


def spec_to_json(spec: SessionSpec) -> dict[str, Any]:
    """Encode an admitted spec. Workspace and execution constraints are never admitted,
    so they have no encoding."""
    requirements = spec.requirements
    if requirements.workspace is not None or requirements.execution is not None:
        raise TypeError("workspace and execution requirements are not admitted")
    persistence = requirements.persistence
    narrowing = narrowing_of(spec)
    return {
        **({} if narrowing == NO_NARROWING else {"narrowing": narrowing.to_json()}),
        "instructions": spec.instructions,
        "model": spec.model,
        "requirements": {
            "approval": requirements.approval.value,
            "questions": requirements.questions.value,
            "diagnostics": requirements.diagnostics.value,
            "retention": requirements.retention.value,
            "history_visibility": requirements.history_visibility.value,
            "persistence": None
            if persistence is None
            else {
                "across_harness_restart": persistence.across_harness_restart,
                "across_process_restart": persistence.across_process_restart,
                "concurrent_access": persistence.concurrent_access,
            },
        },
    }


def spec_from_json(data: Any) -> SessionSpec:
    """The stored spec; a :class:`NarrowedSessionSpec` when it narrowed the profile."""
    try:
        raw = data["requirements"]
        persistence = raw.get("persistence")
        narrowing = Narrowing.from_json(data.get("narrowing"))
        kind = SessionSpec if narrowing == NO_NARROWING else NarrowedSessionSpec
        extra: dict[str, Any] = {} if narrowing == NO_NARROWING else {"narrowing": narrowing}
        return kind(
            **extra,
            instructions=data.get("instructions"),
            model=data.get("model"),
            requirements=SessionRequirements(
                approval=ApprovalRequirement(raw["approval"]),
                questions=QuestionRequirement(raw["questions"]),
                diagnostics=DiagnosticsRequirement(raw["diagnostics"]),
                retention=ContextRetentionRequirement(raw["retention"]),
                history_visibility=UserHistoryVisibilityRequirement(raw["history_visibility"]),
                persistence=None if persistence is None else PersistenceRequirement(**persistence),
            ),
        )
    except (KeyError, ValueError, TypeError) as error:
        raise DecodeError(f"malformed session spec: {error}") from error


@dataclass(frozen=True, slots=True)
class TaskInputRecord:
    """What a worker reads of a task's input (``TaskField.INPUT``)."""

    text: str
    output_schema: str | None = None
    """The JSON Schema (as the caller gave it) of a task requiring structured output."""
    narrowing: Narrowing = NO_NARROWING
    """How the task narrows its session's profile (``wire.narrowing``)."""


def task_input_to_json(request: TaskRequest) -> dict[str, Any]:
    """Encode an admitted request's input: ``{"text"}``, plus ``"output_schema"`` when it
    requires structured output and ``"narrowing"`` when it narrows its session."""
    if not isinstance(request.input, TextInput):
        raise TypeError("only TextInput is admitted")
    data: dict[str, Any] = {"text": request.input.text}
    output = request.requirements.output
    if isinstance(output, StructuredOutputRequirement):
        data["output_schema"] = output.schema
    narrowing = narrowing_of(request)
    if narrowing != NO_NARROWING:
        data["narrowing"] = narrowing.to_json()
    return data


def task_input_from_json(data: Any) -> TaskInputRecord:
    if not isinstance(data, Mapping) or not isinstance(data.get("text"), str):
        raise DecodeError("task input must be an object with text")
    schema = data.get("output_schema")
    if schema is not None and not isinstance(schema, str):
        raise DecodeError("a task input's output_schema must be a string")
    return TaskInputRecord(data["text"], schema, Narrowing.from_json(data.get("narrowing")))


# -- run metadata ----------------------------------------------------------------------

RESERVED_METADATA_PREFIX = "ahp_"
MAX_RUN_METADATA_CHARACTERS = 4096


def run_metadata_json(metadata: Mapping[str, str]) -> str:
    """Encode a harness's run metadata for the session record; refuses what is not a
    small mapping of strings, and the reserved ``ahp_`` keys the worker sets itself."""
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError("run metadata maps strings to strings")
        if key.startswith(RESERVED_METADATA_PREFIX):
            raise ValueError(f"run metadata key {key!r}: the prefix 'ahp_' is reserved")
    encoded = dumps(dict(metadata))
    if len(encoded) > MAX_RUN_METADATA_CHARACTERS:
        raise ValueError(f"run metadata exceeds {MAX_RUN_METADATA_CHARACTERS} characters")
    return encoded


def run_metadata_from_json(text: str) -> dict[str, str]:
    """The run metadata of a session record (empty when the record has none)."""
    if not text:
        return {}
    data = loads(text)
    if not isinstance(data, Mapping):
        raise DecodeError("run metadata must be an object")
    return {
        str(key): str(value)
        for key, value in data.items()
        if not str(key).startswith(RESERVED_METADATA_PREFIX)
    }
