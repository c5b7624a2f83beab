"""Build the tools a profile declares, by import path (no pickle: nothing is deserialized)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from wire.profiles import ToolSpec

from .errors import ToolBuildError
from .tool_delivery import idempotency_key

__all__ = ["build_tool", "build_tools", "idempotency_key"]


def build_tool(spec: ToolSpec) -> BaseTool:
    """Import ``package.module:attribute``: a ``BaseTool`` named ``spec.name``, or a callable
    wrapped as a structured tool with the spec's name and description."""
    module_name, _, attribute = spec.target.partition(":")
    try:
        target: Any = getattr(importlib.import_module(module_name), attribute)
    except Exception as error:
        raise ToolBuildError(f"cannot import tool {spec.target!r}: {error}") from error
    if isinstance(target, BaseTool):
        if target.name != spec.name:
            raise ToolBuildError(
                f"tool {spec.target!r} is named {target.name!r}, the profile says {spec.name!r}"
            )
        return target
    if not callable(target):
        raise ToolBuildError(f"{spec.target!r} is neither a BaseTool nor a callable")
    try:
        if inspect.iscoroutinefunction(target):
            return StructuredTool.from_function(
                coroutine=target, name=spec.name, description=spec.description
            )
        return StructuredTool.from_function(
            func=target, name=spec.name, description=spec.description
        )
    except Exception as error:
        raise ToolBuildError(f"cannot build tool {spec.target!r}: {error}") from error


def build_tools(specs: Sequence[ToolSpec]) -> list[BaseTool]:
    return [build_tool(spec) for spec in specs]
