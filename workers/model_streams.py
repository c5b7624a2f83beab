"""Close the chat model's own stream when a model call ends, however it ends.

A model call goes through LangChain's ``BaseChatModel.astream``, an async generator that
iterates the model's ``_astream`` (the provider's stream: an HTTP response, a local
generation) and awaits the run's callbacks between chunks. When the call is cancelled
while ``astream`` awaits a callback, the cancellation leaves ``astream`` with the
provider's generator suspended at its ``yield``: Python does not close an async generator
that an ``async for`` left by an exception. The provider's stream then stays open, and
its generation may go on, until the garbage collector finalizes it, seconds or minutes
later; the soak saw a cancelled run's model call outlive its lease by 34 s that way.

:func:`track_streams` makes a model register every stream its ``_astream`` opens in the
current call's registry, and :func:`closing_model_streams` closes them all when the call
ends (``aclose``: the provider's ``finally`` runs, its connection is released).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any

from langchain_core.language_models import BaseChatModel

_OPEN: ContextVar[list[Any] | None] = ContextVar("ahp_open_model_streams", default=None)
_TRACKED = "_ahp_streams_tracked"


def track_streams(model: BaseChatModel) -> BaseChatModel:
    """Make ``model`` register each stream its ``_astream`` opens (idempotent). LangChain
    decides whether a model streams by its class, which this leaves alone."""
    if getattr(model, _TRACKED, False):
        return model
    opened: Callable[..., Any] = model._astream

    def _astream(*args: Any, **kwargs: Any) -> Any:
        stream = opened(*args, **kwargs)
        registry = _OPEN.get()
        if registry is not None:
            registry.append(stream)
        return stream

    # An instance attribute shadows the class's method; pydantic's __setattr__ is skipped.
    object.__setattr__(model, "_astream", _astream)
    object.__setattr__(model, _TRACKED, True)
    return model


@contextlib.asynccontextmanager
async def closing_model_streams() -> AsyncIterator[None]:
    """Every stream a tracked model opens inside is closed on the way out."""
    registry: list[Any] = []
    token = _OPEN.set(registry)
    try:
        yield
    finally:
        _OPEN.reset(token)
        for stream in reversed(registry):
            close = getattr(stream, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()


__all__ = ["closing_model_streams", "track_streams"]
