"""The long-running services ``ahp-celery api`` and ``ahp-celery flower`` start.

``api`` serves the HTTP submit API (``harness.api``) with uvicorn, built by its factory so
every worker process makes its own app from the environment's settings.

``flower`` runs Flower against the deployment's broker with the project's Celery app
(``workers.main``). Flower can revoke and terminate tasks and shows their arguments, so it
never starts without authentication unless that is asked for explicitly. The basic-auth
credentials reach Flower through its environment (``FLOWER_BASIC_AUTH``), never on its
command line, where ``ps`` would show them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping

__all__ = [
    "API_FACTORY",
    "BASIC_AUTH_ENV",
    "api_available",
    "check_basic_auth",
    "flower_command",
    "flower_environment",
]

API_FACTORY = "harness.api.app:create_app"
"""The import string uvicorn builds the HTTP API from (``factory=True``)."""

BASIC_AUTH_ENV = "FLOWER_BASIC_AUTH"
"""``user:password[,user:password...]``, read by Flower itself."""


def api_available() -> bool:
    """Whether this installation has the HTTP API's module."""
    module = API_FACTORY.split(":", 1)[0]
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def check_basic_auth(value: str) -> str:
    """``value`` if it is ``user:password`` pairs separated by commas, each part non-blank.

    Raises:
        ValueError: otherwise (the message never repeats a password).
    """
    pairs = value.split(",")
    for index, pair in enumerate(pairs, 1):
        user, colon, password = pair.partition(":")
        if not colon or not user.strip() or not password.strip():
            raise ValueError(
                f"credential {index} of {len(pairs)} is not 'user:password' with both parts set"
            )
    return value


def flower_command(host: str, port: int, url_prefix: str | None = None) -> list[str]:
    """The command line of Flower for the deployment's Celery app (``workers.main``)."""
    args = [sys.executable, "-m", "celery", "-A", "workers.main", "flower"]
    args += [f"--address={host}", f"--port={port}"]
    if url_prefix:
        args.append(f"--url_prefix={url_prefix}")
    return args


def flower_environment(
    basic_auth: str | None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of Flower: ``base`` (default: this process's) with the credentials
    set, or without any inherited ones when it runs unauthenticated."""
    env = dict(os.environ if base is None else base)
    env.pop(BASIC_AUTH_ENV, None)
    if basic_auth is not None:
        env[BASIC_AUTH_ENV] = basic_auth
    return env
