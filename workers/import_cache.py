"""Make known-missing optional imports fail fast.

The Redis checkpointer's reviver tries ``import langchain.schema.messages`` for every
stored message before falling back to ``langchain_core``. ``langchain`` 1.x (the agent
factory the workers use) has no ``langchain.schema``, so that import fails, and Python
does not cache failures: every attempt searches again. At turn 200 of a session this
dominated a turn's CPU time. When ``langchain.schema`` is absent at worker start, this
finder answers those imports with the same ``ModuleNotFoundError`` at once. Installing
it later in a running worker is not supported (restart the worker).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType


class _MissingPackageFinder(importlib.abc.MetaPathFinder):
    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == self.package or fullname.startswith(self.package + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def fail_fast_if_missing(package: str) -> bool:
    """Install the finder for ``package`` if it is not importable; whether it was."""
    if any(
        isinstance(finder, _MissingPackageFinder) and finder.package == package
        for finder in sys.meta_path
    ):
        return True
    try:
        if importlib.util.find_spec(package) is not None:
            return False
    except ModuleNotFoundError:
        pass  # its parent package is missing too
    sys.meta_path.insert(0, _MissingPackageFinder(package))
    return True
