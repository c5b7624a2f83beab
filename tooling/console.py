"""The terminal every command shares: its consoles, its way to fail, its settings."""

from __future__ import annotations

import typer
from pydantic import ValidationError
from rich.console import Console

from wire.settings import Settings

__all__ = ["console", "err", "fail", "load_settings"]

# soft_wrap: streamed model text and URLs are never broken by inserted newlines.
console = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``message`` as an error; the ``typer.Exit`` to raise with ``code``."""
    err.print(f"[bold red]error:[/] {message}", markup=True)
    return typer.Exit(code)


def load_settings(**overrides: object) -> Settings:
    """The deployment's settings from the environment (``AHP_*``, ``REDIS_URL``)."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        raise fail(f"invalid settings from the environment:\n{error}", 2) from None
