"""Structured output: the JSON Schema a task requires, and the judgment of an answer.

Both sides use this one module. The caller admits a ``StructuredOutputRequirement``
only if :func:`schema_problems` finds nothing; the worker asks the model for a document
(:func:`output_instruction`) and judges the answer with :func:`judge_answer` before it
settles the outcome, so ``await_outcome``, ``events()``, ``state`` and the HTTP API all
report the same judgment.

Schemas are JSON Schema Draft 2020-12 (a ``$schema`` naming another dialect is refused).
References are resolved only within the schema document: nothing is ever retrieved from
the network or the file system (a worker must not fetch what a caller names). ``format``
is an annotation, as Draft 2020-12 specifies by default, not an assertion.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from agent_harness_protocol import SchemaValidation
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from .errors import OutputSchemaError

DIALECT = "https://json-schema.org/draft/2020-12/schema"
MAX_SCHEMA_CHARACTERS = 100_000
"""A schema travels in the task record and in the system prompt of every model call."""
MAX_REPORTED_PROBLEMS = 10
_BASE_URI = "urn:ahp:output-schema"
_REFERENCE_KEYWORDS = ("$ref", "$dynamicRef")


class _NotJson(ValueError):
    pass


def _strict_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise _NotJson(f"duplicate key {key!r}")
        document[key] = value
    return document


def _refuse_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not JSON")


def _strict_loads(text: str) -> Any:
    """JSON as RFC 8259 defines it: no NaN or Infinity, no duplicate keys."""
    try:
        return json.loads(text, object_pairs_hook=_strict_pairs, parse_constant=_refuse_constant)
    except RecursionError:
        raise _NotJson("nested too deeply") from None
    except ValueError as error:  # JSONDecodeError and _NotJson
        raise _NotJson(str(error)) from None


def _references(node: Any) -> Iterator[str]:
    if isinstance(node, Mapping):
        for keyword in _REFERENCE_KEYWORDS:
            value = node.get(keyword)
            if isinstance(value, str):
                yield value
        for value in node.values():
            yield from _references(value)
    elif isinstance(node, list):
        for value in node:
            yield from _references(value)


def _has_nested_id(node: Any, root: bool = True) -> bool:
    if isinstance(node, Mapping):
        if not root and "$id" in node:
            return True
        return any(_has_nested_id(value, False) for value in node.values())
    if isinstance(node, list):
        return any(_has_nested_id(value, False) for value in node)
    return False


def schema_problems(text: str) -> tuple[str, ...]:
    """Why ``text`` is not a usable output schema; empty when it is one."""
    if len(text) > MAX_SCHEMA_CHARACTERS:
        return (f"a schema of {len(text)} characters exceeds the limit of {MAX_SCHEMA_CHARACTERS}",)
    try:
        schema = _strict_loads(text)
    except _NotJson as error:
        return (f"the schema is not JSON: {error}",)
    if not isinstance(schema, dict | bool):
        return ("a JSON Schema is an object or a boolean",)
    if isinstance(schema, bool):
        return ()
    dialect = schema.get("$schema", DIALECT)
    if not isinstance(dialect, str) or dialect.rstrip("#") != DIALECT:
        return (f"only JSON Schema Draft 2020-12 ({DIALECT}) is supported, not {dialect!r}",)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        where = "/".join(str(part) for part in error.absolute_path)
        return (f"not a valid Draft 2020-12 schema at /{where}: {error.message}",)
    except RecursionError:
        return ("the schema is nested too deeply",)
    problems: list[str] = []
    references = list(_references(schema))
    remote = sorted({ref for ref in references if not ref.startswith("#")})
    problems.extend(
        f"reference {ref!r} leaves the schema document; references are never retrieved"
        for ref in remote
    )
    if not remote and not _has_nested_id(schema):
        # Every reference resolves against the root: check that each one does.
        resolver = (
            Registry()
            .with_resource(_BASE_URI, DRAFT202012.create_resource(schema))
            .resolver(base_uri=_BASE_URI)
        )
        for ref in sorted(set(references)):
            try:
                resolver.lookup(ref)
            except Unresolvable as error:
                problems.append(f"reference {ref!r} does not resolve: {error}")
    return tuple(problems)


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """An admitted output schema (see :func:`parse_schema`)."""

    text: str
    """The schema as the caller gave it: what the model is shown."""
    document: dict[str, Any] | bool


def parse_schema(text: str) -> OutputSchema:
    """The schema ``text`` names; raises :class:`OutputSchemaError` if it is not usable."""
    problems = schema_problems(text)
    if problems:
        raise OutputSchemaError(problems)
    document = _strict_loads(text)
    assert isinstance(document, dict | bool)
    return OutputSchema(text, document)


def output_instruction(schema: OutputSchema) -> str:
    """What a worker asks of the model for a task that requires structured output."""
    return (
        "Answer with exactly one JSON document that conforms to the following JSON Schema "
        "(Draft 2020-12), and with nothing else (no prose, no code fence):\n" + schema.text
    )


@dataclass(frozen=True, slots=True)
class Judgment:
    """The structured output an answer makes, and why it is invalid (if it is)."""

    json: str
    """The JSON document the answer carries (without a code fence around it), or the
    whole answer when it carries none."""
    validation: SchemaValidation
    problems: tuple[str, ...] = ()


def _unfenced(answer: str) -> str:
    """The answer without surrounding whitespace and one enclosing Markdown code fence
    (models add one despite being told not to)."""
    text = answer.strip()
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        first_line_end = text.find("\n")
        if first_line_end != -1:
            return text[first_line_end + 1 : -3].strip()
    return text


def _path(parts: Any) -> str:
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parts)


def judge_answer(schema: OutputSchema, answer: str) -> Judgment:
    """Validate the model's answer against ``schema``: ``VALID``, ``INVALID`` (with the
    problems found), or ``NOT_VALIDATED`` when a reference cannot be resolved while
    validating (the answer is then neither passed nor failed)."""
    document_text = _unfenced(answer)
    try:
        instance = _strict_loads(document_text)
    except _NotJson as error:
        return Judgment(answer, SchemaValidation.INVALID, (f"the answer is not JSON: {error}",))
    validator = Draft202012Validator(schema.document, registry=Registry())
    try:
        errors = sorted(validator.iter_errors(instance), key=lambda error: list(error.path))
    except Unresolvable as error:
        return Judgment(
            document_text,
            SchemaValidation.NOT_VALIDATED,
            (f"the schema's reference could not be resolved: {error}",),
        )
    except RecursionError:
        return Judgment(
            document_text, SchemaValidation.NOT_VALIDATED, ("the answer is nested too deeply",)
        )
    if not errors:
        return Judgment(document_text, SchemaValidation.VALID)
    problems = tuple(
        f"{_path(error.absolute_path)}: {error.message}" for error in errors[:MAX_REPORTED_PROBLEMS]
    )
    if len(errors) > MAX_REPORTED_PROBLEMS:
        problems += (f"and {len(errors) - MAX_REPORTED_PROBLEMS} more",)
    return Judgment(document_text, SchemaValidation.INVALID, problems)


__all__ = [
    "DIALECT",
    "Judgment",
    "OutputSchema",
    "OutputSchemaError",
    "judge_answer",
    "output_instruction",
    "parse_schema",
    "schema_problems",
]
