"""Build the chat model a profile names, by import path or as an ``init_chat_model``
provider string (no pickle: nothing is unpickled)."""

from __future__ import annotations

import importlib
from typing import Any

from langchain_core.language_models import BaseChatModel

from wire.profiles import ModelSource, ModelSpec

from .errors import ModelBuildError


def build_model(spec: ModelSpec) -> BaseChatModel:
    """Import ``package.module:Attribute`` and call it with the spec's options, or build
    ``provider:model`` with langchain's ``init_chat_model``."""
    try:
        if spec.source is ModelSource.PROVIDER:
            from langchain.chat_models import init_chat_model

            options: dict[str, Any] = dict(spec.options)
            model: Any = init_chat_model(spec.target, **options)
        else:
            module_name, _, attribute = spec.target.partition(":")
            factory: Any = getattr(importlib.import_module(module_name), attribute)
            model = factory(**dict(spec.options))
    except Exception as error:
        raise ModelBuildError(f"cannot build model {spec.target!r}: {error}") from error
    if not isinstance(model, BaseChatModel):
        raise ModelBuildError(f"{spec.target!r} built {type(model).__name__}, not a BaseChatModel")
    return model
