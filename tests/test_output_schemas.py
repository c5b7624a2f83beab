"""Output schemas: which are admitted, and how an answer is judged against one.

Pure functions of ``wire.structured_output`` (the real ``jsonschema`` validator); the
path through workers is in ``tests/test_structured_output.py``.
"""

from __future__ import annotations

import json

import pytest
from agent_harness_protocol import SchemaValidation

from wire.errors import OutputSchemaError
from wire.structured_output import judge_answer, parse_schema, schema_problems

PERSON = json.dumps(
    {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"$ref": "#/$defs/age"},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
        "$defs": {"age": {"type": "integer", "minimum": 0}},
    }
)


@pytest.mark.parametrize(
    "schema",
    [
        PERSON,
        "true",
        '{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array"}',
        '{"prefixItems": [{"type": "string"}], "items": false}',
    ],
)
def test_valid_draft_2020_12_schemas_are_admitted(schema: str) -> None:
    assert schema_problems(schema) == ()
    assert parse_schema(schema).text == schema


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ('{"type": 5}', "not a valid Draft 2020-12 schema"),
        ('{"type": "object",', "not JSON"),
        ("[1, 2]", "object or a boolean"),
        ('{"minimum": NaN}', "not JSON"),
        ('{"type": "string", "type": "integer"}', "duplicate key"),
        ('{"$schema": "http://json-schema.org/draft-07/schema#"}', "only JSON Schema Draft"),
        ('{"$ref": "https://example.com/person.json"}', "never retrieved"),
        ('{"$ref": "#/$defs/missing"}', "does not resolve"),
        ('{"properties": {"a": {"minLength": -1}}}', "at /properties/a/minLength"),
    ],
)
def test_unusable_schemas_are_refused_with_the_reason(schema: str, problem: str) -> None:
    problems = schema_problems(schema)
    assert problems
    assert any(problem in text for text in problems), problems
    with pytest.raises(OutputSchemaError):
        parse_schema(schema)


def test_a_conforming_answer_is_valid_and_kept_as_written() -> None:
    answer = '{"name": "Ada", "age": 36}'
    judgment = judge_answer(parse_schema(PERSON), answer)
    assert judgment.validation is SchemaValidation.VALID
    assert judgment.json == answer
    assert judgment.problems == ()


def test_a_fenced_conforming_answer_is_valid_without_its_fence() -> None:
    judgment = judge_answer(parse_schema(PERSON), '```json\n{"name": "Ada", "age": 36}\n```\n')
    assert judgment.validation is SchemaValidation.VALID
    assert judgment.json == '{"name": "Ada", "age": 36}'


def test_a_nonconforming_answer_is_invalid_with_every_problem_located() -> None:
    answer = '{"name": 7, "age": -1, "extra": true}'
    judgment = judge_answer(parse_schema(PERSON), answer)
    assert judgment.validation is SchemaValidation.INVALID
    assert judgment.json == answer
    joined = " | ".join(judgment.problems)
    assert "$.name: 7 is not of type 'string'" in joined
    assert "$.age: -1 is less than the minimum of 0" in joined  # through the $ref
    assert "'extra' was unexpected" in joined


@pytest.mark.parametrize(
    "answer",
    ["Sure! Here is the person you asked for.", "", '{"name": "Ada", "age": NaN}', "{'a': 1}"],
)
def test_an_answer_that_is_not_json_is_invalid_and_reported_whole(answer: str) -> None:
    judgment = judge_answer(parse_schema("true"), answer)
    assert judgment.validation is SchemaValidation.INVALID
    assert judgment.json == answer
    assert "not JSON" in judgment.problems[0]


def test_the_false_schema_accepts_no_document() -> None:
    judgment = judge_answer(parse_schema("false"), "{}")
    assert judgment.validation is SchemaValidation.INVALID
