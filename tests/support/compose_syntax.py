"""A compose file as compose reads it: its ``${VAR}`` interpolation, and each service's
environment, command line and options as its container gets them.

Shared by the checks of the file (``tests.support.compose_check``) and of its commands
(``tests.support.compose_commands``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from typing import Any

REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}")

Problems = list[str]
"""What is wrong, one line each: empty when nothing is."""


def interpolate(node: object, env: Mapping[str, str], refused: list[str]) -> Any:
    """Compose's variable substitution in every string value of a parsed file
    (``${VAR}``, ``:-``, ``-``, ``:?``, ``?``, ``:+``, ``+``, ``$$``); the variables it would
    refuse to start without are added to ``refused``."""
    if isinstance(node, Mapping):
        return {key: interpolate(value, env, refused) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(value, env, refused) for value in node]
    if not isinstance(node, str):
        return node

    def value(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"] or ""
        current = env.get(name)
        empty = current is None or (current == "" and op is not None and op.startswith(":"))
        if op in {":-", "-"}:
            return arg if empty else str(current)
        if op in {":?", "?"}:
            if empty:
                refused.append(name)
                return ""
            return str(current)
        if op in {":+", "+"}:
            return "" if empty else arg
        return current or ""

    return "$".join(REFERENCE.sub(value, part) for part in node.split("$$"))


def env_of(service: Mapping[str, Any]) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        pairs = (item.split("=", 1) if "=" in item else (item, "") for item in raw)
        return {key: value for key, value in pairs}
    return {str(key): "" if value is None else str(value) for key, value in raw.items()}


def argv_of(command: object) -> list[str]:
    if isinstance(command, str):
        return shlex.split(command)
    if isinstance(command, list):
        return [str(item) for item in command]
    return []


def walk(node: object, path: str = "") -> Iterator[tuple[str, object]]:
    yield path, node
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{path}/{index}")


def flag_of(argv: list[str], name: str) -> str | None:
    for index, arg in enumerate(argv):
        if arg == name and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


__all__ = ["REFERENCE", "Problems", "argv_of", "env_of", "flag_of", "interpolate", "walk"]
