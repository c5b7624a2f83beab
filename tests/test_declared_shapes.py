"""Every shape is declared once: no two declarations list the same fields.

A shape is a record, message, event or body with named fields: a dataclass, a pydantic
model, a string enum (a record's field names), a module-level tuple of field names, or a
Lua table of field names in ``wire/lua``. Two of them with the same field set are the same
shape written twice, and drift apart when one is changed (the usage fields were once
written in ``wire.codec``, ``wire/lua/_prelude.lua`` and ``harness.api.models``). Derive
one from the other instead (``wire.usage`` is the model for it).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import pkgutil
import re
from collections import defaultdict
from pathlib import Path

import pydantic

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("wire", "harness", "workers", "tooling")
SKIPPED_MODULES = {"workers.local_model"}
"""Imports ``llama_cpp`` (the ``local`` extra, not installed in CI)."""
SMALLEST = 3
"""Field sets smaller than this are too common to be a shape written twice."""

_LUA_TABLE = re.compile(r"\{((?:\s*'[a-z_]+'\s*,)+\s*'[a-z_]+'\s*)\}")


def _class_fields(cls: type) -> tuple[str, ...] | None:
    if dataclasses.is_dataclass(cls):
        return tuple(field.name for field in dataclasses.fields(cls))
    if issubclass(cls, pydantic.BaseModel):
        return tuple(cls.model_fields)
    if issubclass(cls, enum.Enum):
        return tuple(str(member.value) for member in cls)
    return None


def _assigned(module: object, name: str) -> str | None:
    """The right-hand side of ``name``'s assignment in ``module``'s source, if it is
    assigned there (and not imported)."""
    source = inspect.getsource(module)  # type: ignore[arg-type]
    match = re.search(rf"^{re.escape(name)}\b[^=\n]*= *(.*)$", source, re.MULTILINE)
    return None if match is None else match.group(1)


def declared_shapes() -> dict[str, frozenset[str]]:
    """Every declaration of a shape in the project, by where it is. A name imported into
    another module is not another declaration, nor is a tuple derived from a model in
    the same step (``tuple(Model.model_fields)``)."""
    shapes: dict[str, frozenset[str]] = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if info.name in SKIPPED_MODULES:
                continue
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                where = f"{info.name}.{name}"
                if inspect.isclass(value) and value.__module__ == info.name:
                    fields = _class_fields(value)
                elif (
                    name.endswith("FIELDS")
                    and isinstance(value, tuple)
                    and all(isinstance(item, str) and item.isidentifier() for item in value)
                ):
                    assigned = _assigned(module, name)
                    if assigned is None or assigned.startswith("tuple("):
                        continue  # imported here, or derived from its declaration
                    fields = value
                else:
                    continue
                if fields is not None and len(set(fields)) >= SMALLEST:
                    shapes[where] = frozenset(fields)
    for script in sorted((ROOT / "wire" / "lua").glob("*.lua")):
        for number, fields in enumerate(lua_tables(script.read_text(encoding="utf-8")), 1):
            shapes[f"wire/lua/{script.name} table {number}"] = fields
    return shapes


def lua_tables(text: str) -> list[frozenset[str]]:
    """The Lua table literals of field names in ``text`` (``{'a', 'b', 'c'}``)."""
    tables = (frozenset(re.findall(r"'([a-z_]+)'", m.group(1))) for m in _LUA_TABLE.finditer(text))
    return [fields for fields in tables if len(fields) >= SMALLEST]


def test_the_shapes_are_found() -> None:
    shapes = declared_shapes()
    # The census sees each kind of declaration (a check that found nothing proves nothing).
    assert "wire.usage.Usage" in shapes
    assert "wire.records.TaskField" in shapes
    assert "harness.api.models.TaskResource" in shapes
    assert len(shapes) > 50
    # The Lua census reads tables as the usage list was once written in _prelude.lua.
    written_twice = """local FIELDS = {'input_tokens','cached_input_tokens','output_tokens',
                'reasoning_tokens','total_tokens','cache_write_input_tokens'}"""
    assert lua_tables(written_twice) == [shapes["wire.usage.Usage"]]


def test_no_two_declarations_list_the_same_fields() -> None:
    by_fields: dict[frozenset[str], list[str]] = defaultdict(list)
    for where, fields in declared_shapes().items():
        by_fields[fields].append(where)
    twice = {fields: sorted(places) for fields, places in by_fields.items() if len(places) > 1}
    assert not twice, "shapes declared more than once: " + "; ".join(
        f"{', '.join(places)} ({', '.join(sorted(fields))})" for fields, places in twice.items()
    )
