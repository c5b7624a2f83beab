"""The record shapes of ``wire.records`` and the Lua scripts use the same field names."""

from __future__ import annotations

import re
from pathlib import Path

from wire.records import SessionField, TaskField
from wire.tenants import TenantField, TenantRateField

LUA = Path(__file__).resolve().parent.parent / "wire" / "lua"
_CALL = re.compile(r"redis\.p?call\(")
_STRING = re.compile(r"""^(['"])([^'"]*)\1$""")
# Which arguments (after the command and the key) name fields.
_FIELD_ARGS = {
    "HGET": slice(0, 1),
    "HEXISTS": slice(0, 1),
    "HINCRBY": slice(0, 1),
    "HSETNX": slice(0, 1),
    "HMGET": slice(0, None),
    "HDEL": slice(0, None),
    "HSET": slice(0, None, 2),
}
# Hashes the scripts write that are not task or session records: (script, key argument).
_OTHER_HASHES = {
    ("claim.lua", "KEYS[8]"),  # the claim counters (<ns>:stats:claims), by ClaimResult
    ("_dead_letters.lua", "counts"),  # dead letters by kind (<ns>:stats:dead-letters)
    # The task statistics (<ns>:stats:tasks, wire.statistics): counters and histograms.
    ("_prelude.lua", "stats"),
    ("_prelude.lua", "statistics_key(starting)"),
    ("start_task.lua", "KEYS[7]"),
    ("rollback_start.lua", "statistics_key(KEYS[3])"),
    # A task's interactions and responses (Keys.interactions / Keys.responses), by id.
    ("_prelude.lua", "responses"),
    ("pause.lua", "KEYS[5]"),
    ("respond.lua", "KEYS[2]"),
    ("respond.lua", "KEYS[3]"),
    # A task's tool attempt counts (Keys.tool_attempts), by tool call id.
    ("tool_attempt.lua", "KEYS[2]"),
}


def _arguments(text: str, start: int) -> list[str]:
    """The top-level arguments of the call whose ``(`` ends just before ``start``."""
    args: list[str] = []
    depth, quote, current = 0, "", ""
    for char in text[start:]:
        if quote:
            current += char
            if char == quote:
                quote = ""
            continue
        if char in "'\"":
            quote = char
        elif char in "({[":
            depth += 1
        elif char in ")}]":
            if depth == 0:
                args.append(current.strip())
                return args
            depth -= 1
        elif char == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        current += char
    raise AssertionError(f"unterminated call at {start}")


def _hash_fields() -> dict[str, set[str]]:
    """Every field name a script passes to a hash command -> the scripts that do."""
    found: dict[str, set[str]] = {}
    for path in sorted(LUA.glob("*.lua")):
        text = "\n".join(line.split("--", 1)[0] for line in path.read_text().splitlines())
        for match in _CALL.finditer(text):
            args = _arguments(text, match.end())
            command = _STRING.match(args[0])
            assert command is not None, f"{path.name}: command is not a literal: {args[0]}"
            positions = _FIELD_ARGS.get(command.group(2).upper())
            if positions is None or (path.name, args[1]) in _OTHER_HASHES:
                continue
            for arg in args[2:][positions]:
                literal = _STRING.match(arg)
                assert literal is not None, f"{path.name}: field is not a literal: {arg}"
                found.setdefault(literal.group(2), set()).add(path.name)
    return found


def test_every_field_a_lua_script_reads_or_writes_is_a_record_field() -> None:
    fields = _hash_fields()
    assert len(fields) >= 10  # the scan sees the scripts' fields at all
    # A tenant's limits and its token bucket are hashes of their own (wire.tenants).
    known = {str(member) for member in (*TaskField, *SessionField, *TenantField, *TenantRateField)}
    unknown = {name: sorted(scripts) for name, scripts in fields.items() if name not in known}
    assert not unknown, f"fields the scripts use that wire.records does not define: {unknown}"


def test_every_record_field_is_used_by_a_script_or_named_as_such() -> None:
    # A member no script touches must still be written from Python (create_session).
    written_by_python = {
        SessionField.SPEC,
        SessionField.PROFILE,
        SessionField.PROFILE_DIGEST,
        SessionField.PERSISTENT,
        SessionField.METADATA,
    }
    fields = _hash_fields()
    unused = {
        member
        for member in (*TaskField, *SessionField)
        if member not in fields and member not in written_by_python
    }
    assert not unused, unused
