"""The caller's modules import each other without a circle: handles share one runtime and
never hold each other (imports under ``TYPE_CHECKING`` count too, they are the same coupling)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _local_imports(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` -> the modules of the same package it imports."""
    modules = {path.stem: path for path in (ROOT / package).glob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 and node.module:
                    target = node.module.split(".")[0]
                elif node.level == 0 and node.module and node.module.startswith(f"{package}."):
                    target = node.module.split(".")[1]
                else:
                    continue
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str] | None:
        if node in visiting:
            return [*visiting[visiting.index(node) :], node]
        if node in done:
            return None
        visiting.append(node)
        for target in sorted(graph[node]):
            found = visit(target)
            if found:
                return found
        visiting.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        found = visit(node)
        if found:
            return found
    return None


@pytest.mark.parametrize("package", ["harness", "wire"])
def test_modules_of_a_package_import_each_other_without_a_circle(package: str) -> None:
    cycle = _cycle(_local_imports(package))
    assert cycle is None, f"import circle in {package}: {' -> '.join(cycle or [])}"


def test_a_task_handle_does_not_import_the_session_handle() -> None:
    assert "session" not in _local_imports("harness")["task"]
