"""Every field of every request body takes only the JSON type its OpenAPI schema names.

The cases come from the served ``/openapi.json``: for each operation with a JSON body,
each property of its schema (nested objects too) gets values of every other JSON type.
A value of the wrong type (``"yes"`` or ``1`` for a boolean, ``"5"`` for an integer, ``5``
for a string) is a 422 problem naming that field, and nothing is written."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import redis

from wire.settings import Settings

from .support.api import api_harness, auth, in_process, keyspace, problem_of
from .support.boundary import ModelBoundary

VALID_BODIES: Mapping[str, dict[str, Any]] = {
    "CreateSession": {},
    "ReopenSession": {},
    "StartTask": {"input": "x"},
    "RunTask": {"input": "x"},
    "Interaction": {"response": {"kind": "answer", "text": "x"}},
    # The LangGraph SDK dialect's bodies (harness/api/langgraph/bodies.py).
    "ThreadCreate": {},
    "ThreadSearch": {},
    "AssistantSearch": {},
    "RunCreate": {"assistant_id": "x", "input": {"messages": [{"role": "user", "content": "x"}]}},
}
"""A body each request schema accepts; the cases change one field of it."""

VALUES: tuple[Any, ...] = ("yes", "true", "5", 1, 0, 5, 1.5, True, False, [], ["x"], {}, {"a": 1})
"""One or more values of every JSON type but ``null`` (left to nullability)."""


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _resolve(schema: Mapping[str, Any], document: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[1]
        schema = document["components"]["schemas"][name]
    return schema


def _types(schema: Mapping[str, Any], document: Mapping[str, Any]) -> set[str]:
    """The JSON types a (resolved) schema admits; empty when it admits any."""
    schema = _resolve(schema, document)
    for union in ("anyOf", "oneOf"):
        if union in schema:
            found: set[str] = set()
            for part in schema[union]:
                admitted = _types(part, document)
                if not admitted:
                    return set()
                found |= admitted
            return found
    if "const" in schema or "enum" in schema:
        values = schema.get("enum", [schema.get("const")])
        return {"string" if isinstance(value, str) else "other" for value in values}
    kind = schema.get("type")
    if isinstance(kind, list):
        return set(kind)
    return {kind} if isinstance(kind, str) else set()


def _wrong_values(admitted: set[str]) -> Iterator[Any]:
    """The values of :data:`VALUES` whose JSON type the field does not admit (an
    integer is a number too); none for a field that admits any (an empty set)."""
    if not admitted:
        return
    if "number" in admitted:
        admitted = admitted | {"integer"}
    for value in VALUES:
        if _json_type(value) not in admitted:
            yield value


def _cases(schema_name: str, document: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(the field's path, a body whose only fault is that field's type)."""
    base = VALID_BODIES[schema_name]

    def walk(
        schema: Mapping[str, Any], body: dict[str, Any], path: tuple[str, ...]
    ) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
        schema = _resolve(schema, document)
        for name, field in schema.get("properties", {}).items():
            for value in _wrong_values(_types(field, document)):
                yield (*path, name), {**body, name: value}
            nested = body.get(name)
            resolved = _resolve(field, document)
            if isinstance(nested, dict) and "properties" in resolved:
                for inner_path, inner in walk(resolved, nested, (*path, name)):
                    yield inner_path, {**body, name: inner}

    for path, body in walk(document["components"]["schemas"][schema_name], base, ()):
        yield ".".join(path), body


def _bodies(document: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(method, path template, request schema name) of every operation with a JSON body."""
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            schema = content.get("application/json", {}).get("schema")
            if schema is None:
                continue
            # An optional body is ``anyOf: [{$ref}, {type: null}]``.
            refs = [part for part in schema.get("anyOf", [schema]) if "$ref" in part]
            assert len(refs) == 1, (method, path, schema)
            yield method.upper(), path, str(refs[0]["$ref"]).rsplit("/", 1)[1]


async def test_a_value_of_the_wrong_json_type_is_refused_for_every_field_and_writes_nothing(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        created = await client.post("/v1/sessions", json={}, headers=auth())
        assert created.status_code == 201, created.text
        session_id = str(created.json()["id"])
        document = (await client.get("/openapi.json")).json()
        operations = list(_bodies(document))
        assert {schema for _, _, schema in operations} == set(VALID_BODIES), sorted(
            {schema for _, _, schema in operations}
        )
        before = keyspace(sync_redis)
        tried = 0
        accepted: list[str] = []
        for method, template, schema_name in operations:
            url = template.format(
                session_id=session_id,
                task_id="t" * 32,
                interaction_id="i" * 32,
                thread_id=session_id,
                run_id="r" * 32,
                assistant_id="a",
            )
            for field, body in _cases(schema_name, document):
                response = await client.request(
                    method,
                    url,
                    content=json.dumps(body),
                    headers={**auth(), "Content-Type": "application/json"},
                )
                tried += 1
                if response.status_code != 422:
                    accepted.append(f"{method} {template} {body}: {response.status_code}")
                    continue
                problem = problem_of(response)
                paths = [issue.get("path", "") for issue in problem.get("issues", [])]
                if not problem["type"].endswith("/invalid-request") or not any(
                    path.startswith(f"body.{field}") for path in paths
                ):
                    accepted.append(f"{method} {template} {body}: {problem['type']} {paths}")
        assert not accepted, f"{len(accepted)} of {tried} accepted: {accepted[:12]}"
        assert tried > 100, tried  # every body's every field, several wrong values each
        assert keyspace(sync_redis) == before
