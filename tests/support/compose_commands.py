"""Every command and healthcheck of a compose file names something the image has.

``ahp-celery`` subcommands and their options (parsed by the typer app, not run), ``celery
-A module`` subcommands (the module imports), ``python -c`` code that compiles, probes of
paths the service serves on the port its command listens on. Part of
``tests.support.compose_check``.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from .compose_syntax import Problems, argv_of, flag_of


def _ahp_celery(args: list[str]) -> str | None:
    from typer.main import get_command

    from tooling.cli import app

    group: Any = get_command(app)
    if not args:
        return "ahp-celery without a subcommand"
    command = group.commands.get(args[0])
    if command is None:
        return f"ahp-celery has no subcommand {args[0]!r} (has {sorted(group.commands)})"
    try:
        command.make_context(args[0], list(args[1:]))
    except Exception as error:
        return f"ahp-celery {args[0]}: {error}"
    if args[0] == "api":
        try:
            services = importlib.import_module("tooling.services")
            module = str(services.API_FACTORY).split(":", 1)[0]
        except (ImportError, AttributeError) as error:
            return f"ahp-celery api: {error}"
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found:
            return f"ahp-celery api: its application module {module} is not in the package"
    return None


def _celery(args: list[str]) -> str | None:
    from celery.bin.celery import celery

    names = set(celery.list_commands(celery.make_context("celery", [])))
    split = next((index for index, arg in enumerate(args) if arg in names), None)
    if split is None:
        return f"celery: no subcommand in {args}"
    try:
        context = celery.make_context("celery", list(args[:split]))
        module = context.params.get("app")
        if not module:
            return "celery: no -A app"
        importlib.import_module(str(module).split(":", 1)[0])
        command = celery.get_command(context, args[split])
        command.make_context(args[split], list(args[split + 1 :]), parent=context)
    except Exception as error:
        return f"celery {' '.join(args[: split + 1])}: {type(error).__name__}: {error}"
    return None


def _python(args: list[str]) -> str | None:
    if len(args) != 2 or args[0] != "-c":
        return f"python {' '.join(args)}: expected python -c CODE"
    try:
        compile(args[1], "<healthcheck>", "exec")
    except SyntaxError as error:
        return f"python -c: {error}"
    return None


def _redis_cli(args: list[str]) -> str | None:
    return None if args[:1] == ["ping"] else f"redis-cli {' '.join(args)}: expected ping"


_COMMANDS: dict[str, Callable[[list[str]], str | None]] = {
    "ahp-celery": _ahp_celery,
    "celery": _celery,
    "python": _python,
    "redis-server": lambda args: None,
    "redis-cli": _redis_cli,
    "grep": lambda args: None,
}


def _command_problem(argv: list[str]) -> str | None:
    if not argv:
        return "an empty command"
    check = _COMMANDS.get(argv[0])
    if check is None:
        return f"{argv[0]!r} is not a program of these images"
    return check(argv[1:])


def _pipelines(test: object) -> list[list[str]]:
    argv = argv_of(test)
    if not argv:
        return []
    if argv[0] == "CMD":
        return [argv[1:]]
    if argv[0] == "CMD-SHELL":
        shell = " ".join(argv[1:])
        segments = re.split(r"\|\||&&|\||;", shell)
        return [shlex.split(segment) for segment in segments if segment.strip()]
    if argv[0] == "NONE":
        return []
    return [argv]


def _listen_port(argv: list[str]) -> str | None:
    return flag_of(argv, "--port")


def _probe_problems(name: str, service: Mapping[str, Any], argv: list[str]) -> Problems:
    """A probe of http://127.0.0.1:PORT/PATH must use the port the command listens on and
    a path the service serves."""
    problems: Problems = []
    test = " ".join(argv_of((service.get("healthcheck") or {}).get("test")))
    for port, path in re.findall(r"https?://(?:127\.0\.0\.1|localhost):(\d+)(/[\w/.-]*)", test):
        if port != _listen_port(argv):
            problems.append(f"{name}: the healthcheck probes port {port}, not the command's")
        try:
            served = _served_paths(name)
        except Exception as error:
            problems.append(f"{name}: its paths cannot be listed: {type(error).__name__}")
            continue
        if served is not None and path not in served:
            problems.append(f"{name}: the healthcheck probes {path}, which it does not serve")
    return problems


def _served_paths(name: str) -> set[str] | None:
    if name == "flower":
        from flower.urls import handlers

        patterns = (h[0] if isinstance(h, tuple) else h.regex.pattern for h in handlers)
        return {str(pattern).removesuffix("$") for pattern in patterns}
    if name == "api":
        services = importlib.import_module("tooling.services")
        module, factory = str(services.API_FACTORY).split(":", 1)
        app = getattr(importlib.import_module(module), factory)()
        return {str(getattr(route, "path", "")) for route in app.routes}
    return None


def command_problems(services: Mapping[str, Any]) -> Problems:
    problems: Problems = []
    for name, service in services.items():
        argv = argv_of(service.get("command"))
        if argv:
            problem = _command_problem(argv)
            if problem is not None:
                problems.append(f"{name}: command: {problem}")
        for pipeline in _pipelines((service.get("healthcheck") or {}).get("test")):
            problem = _command_problem(pipeline)
            if problem is not None:
                problems.append(f"{name}: healthcheck: {problem}")
        problems += _probe_problems(name, service, argv)
    return problems


__all__ = ["command_problems"]
