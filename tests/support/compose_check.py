"""What is wrong with a compose file of this deployment: a list of problems, empty when none.

No container engine runs where the tests run, so the file is checked for what compose
and the images would find wrong, without running them:

- the Compose specification's JSON Schema (the copy check-jsonschema ships), on the file
  as written and after compose's ``${VAR}`` interpolation with every variable set;
- every variable a secret comes from is required (``${VAR:?message}``): unset, compose
  refuses to start, and no default value (a secret in the file) exists;
- no secret literal: passwords, tokens and credentials (environment entries named like
  one, the password of every Redis URL, ``--requirepass``) are ``${VAR}`` references;
- Redis 8 with append-only persistence, ``noeviction``, a password and a healthcheck that
  authenticates without putting the password on a command line;
- the api, worker and flower services each reach that Redis with its password; the
  worker scales (no container name, no host port); Flower has authentication and the
  published ports bind to the loopback interface;
- every command and healthcheck names something the image has
  (``tests.support.compose_commands``).

How the file reads (interpolation, a service's environment and command line):
``tests.support.compose_syntax``.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import resources
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml
from jsonschema import Draft202012Validator

from .compose_commands import command_problems
from .compose_syntax import REFERENCE, Problems, argv_of, env_of, flag_of, interpolate, walk

_SERVICES = ("redis", "api", "worker", "flower")
_AHP_SERVICES = ("api", "worker", "flower")
_SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|AUTH|PASSWD|CREDENTIAL|API_KEY", re.I)
_REQUIRED = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*:?\?[^}]*\}$")
"""A whole value that is one required reference: ``${VAR:?message}`` or ``${VAR?message}``."""
_REQUIRED_OR_PLAIN = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(:?\?[^}]*)?\}$")


def compose_schema() -> dict[str, Any]:
    """The Compose specification's JSON Schema as vendored by check-jsonschema."""
    package = resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads((package / "compose-spec.json").read_text("utf-8"))
    return schema


def _schema_problems(document: object, label: str) -> Problems:
    validator = Draft202012Validator(compose_schema())
    return [
        f"schema ({label}): {'/'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}"
        for error in sorted(validator.iter_errors(document), key=lambda e: list(e.path))
    ]


_SECRET_FLAGS = frozenset({"requirepass", "masterauth", "basic-auth", "basic_auth"})


def _secret_problems(document: Mapping[str, Any]) -> Problems:
    """Checks of the file as written: every secret is a required reference."""
    problems: Problems = []
    services: Mapping[str, Any] = document.get("services") or {}
    for name, service in services.items():
        for key, value in env_of(service).items():
            secret = _SECRET_NAME.search(key) and not key.endswith("_FILE")
            if secret and not _REQUIRED.match(value):
                problems.append(
                    f"{name}: environment {key} must be a required reference "
                    f"${{VAR:?message}}, not {'a literal' if value else 'empty'}"
                )
        argv = argv_of(service.get("command"))
        for flag, value in pairwise(argv):
            if flag.lstrip("-").lower() in _SECRET_FLAGS and not _REQUIRED.match(value):
                problems.append(f"{name}: {flag} takes a literal; use ${{VAR:?message}}")
        for arg in argv:
            key, _, value = arg.partition("=")
            if value and _SECRET_NAME.search(key) and not _REQUIRED.match(value):
                problems.append(f"{name}: {key} on the command line")
    for path, node in walk(document):
        if isinstance(node, str) and "://" in node:
            problems += _url_problems(path, node)
    return problems


def _url_problems(path: str, url: str) -> Problems:
    match = re.match(r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<userinfo>[^@/]*)@", url)
    if match is None:
        return []
    userinfo = match["userinfo"]
    password = userinfo.split(":", 1)[1] if ":" in userinfo else userinfo
    if password and not _REQUIRED_OR_PLAIN.match(password):
        return [f"{path}: the URL's password is a literal; use ${{VAR:?message}}"]
    return []


def _redis_problems(redis: Mapping[str, Any]) -> Problems:
    problems: Problems = []
    image = str(redis.get("image", ""))
    if not re.match(r"^(docker\.io/)?(library/)?redis:8(\b|[.-])", image):
        problems.append(f"redis: image {image!r} is not Redis 8 (the checkpoints need it)")
    argv = argv_of(redis.get("command"))
    if not argv or argv[0] != "redis-server":
        problems.append("redis: the command must be redis-server (the image loads modules)")
    if (flag_of(argv, "--appendonly") or "").lower() != "yes":
        problems.append("redis: --appendonly yes is missing")
    if flag_of(argv, "--maxmemory-policy") != "noeviction":
        problems.append("redis: --maxmemory-policy noeviction is missing")
    password = flag_of(argv, "--requirepass")
    if password is None:
        problems.append("redis: no password (--requirepass)")
    check = redis.get("healthcheck") or {}
    test = " ".join(argv_of(check.get("test")))
    if check.get("disable") or "redis-cli" not in test or "ping" not in test:
        problems.append("redis: no healthcheck pinging it with redis-cli")
    elif password is not None:
        if " -a " in f" {test} " or "--pass" in test:
            problems.append("redis: the healthcheck puts the password on a command line")
        if env_of(redis).get("REDISCLI_AUTH") != password:
            problems.append("redis: the healthcheck has no password (REDISCLI_AUTH)")
    return problems


def _service_problems(services: Mapping[str, Any]) -> Problems:
    """Checks of the interpolated services (values as the containers get them)."""
    problems: Problems = []
    password = flag_of(argv_of((services.get("redis") or {}).get("command")), "--requirepass")
    for name in _AHP_SERVICES:
        service = services.get(name) or {}
        url = env_of(service).get("AHP_REDIS_URL") or env_of(service).get("REDIS_URL") or ""
        parts = urlsplit(url)
        if parts.scheme not in {"redis", "rediss"} or parts.hostname != "redis":
            problems.append(f"{name}: REDIS_URL does not point at the redis service")
        elif password is not None and unquote(parts.password or "") != password:
            problems.append(f"{name}: REDIS_URL lacks the Redis password")
        if name != "worker":
            problems += _loopback_ports(name, service)
    worker = services.get("worker") or {}
    if "container_name" in worker:
        problems.append("worker: a container_name prevents --scale worker=N")
    if any(":" in str(port) for port in worker.get("ports") or []):
        problems.append("worker: a host port prevents --scale worker=N")
    flower = services.get("flower") or {}
    flower_env = env_of(flower)
    if "FLOWER_BASIC_AUTH" not in flower_env and "FLOWER_AUTH" not in flower_env:
        problems.append("flower: no authentication (FLOWER_BASIC_AUTH)")
    if flower_env.get("FLOWER_UNAUTHENTICATED_API", "").lower() in {"1", "true", "yes"}:
        problems.append("flower: FLOWER_UNAUTHENTICATED_API opens its API")
    if "--unauthenticated" in argv_of(flower.get("command")):
        problems.append("flower: started --unauthenticated")
    return problems


def _secret_mount_problems(document: Mapping[str, Any], image_uid: str | None) -> Problems:
    """Each secret a service mounts is declared, readable by the image's user, and the
    ``*_FILE`` variable that points at it names a mounted secret."""
    problems: Problems = []
    declared = set((document.get("secrets") or {}).keys())
    services: Mapping[str, Any] = document.get("services") or {}
    for name, service in services.items():
        mounted: set[str] = set()
        for entry in service.get("secrets") or []:
            source = entry if isinstance(entry, str) else str(entry.get("source", ""))
            target = source if isinstance(entry, str) else str(entry.get("target") or source)
            mounted.add(f"/run/secrets/{target}")
            if source not in declared:
                problems.append(f"{name}: secret {source!r} is not declared")
            uid = None if isinstance(entry, str) else entry.get("uid")
            if image_uid is not None and str(uid) != image_uid:
                problems.append(
                    f"{name}: secret {source!r} is not owned by the image's user "
                    f"(uid {image_uid}); Compose may mount it for root only"
                )
        for key, value in env_of(service).items():
            secret_file = key.endswith("_FILE") and value.startswith("/run/secrets/")
            if secret_file and value not in mounted:
                problems.append(f"{name}: {key} names {value}, which is not mounted")
    return problems


_SETTINGS = {
    "api": ("wire.settings:Settings", "harness.api.settings:ApiSettings"),
    "worker": ("wire.settings:Settings",),
    "flower": ("wire.settings:Settings",),
}
"""The settings classes each service builds from its environment at start."""


@contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` holding only ``values`` (and PATH) for the block."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({"PATH": saved.get("PATH", ""), **values})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _settings_problems(
    document: Mapping[str, Any], env: Mapping[str, str], scratch: Path
) -> Problems:
    """Each service's settings load from the environment compose gives it; a secret
    file it reads is written from the variable compose makes it from."""
    problems: Problems = []
    secrets: Mapping[str, Any] = document.get("secrets") or {}
    services: Mapping[str, Any] = document.get("services") or {}
    for name, classes in _SETTINGS.items():
        values = env_of(services.get(name) or {})
        for key, value in list(values.items()):
            secret = value.removeprefix("/run/secrets/")
            if key.endswith("_FILE") and secret != value:
                source = str((secrets.get(secret) or {}).get("environment", ""))
                path = scratch / f"{name}-{secret}"
                path.write_text(env.get(source, ""), encoding="utf-8")
                values[key] = str(path)
        for target in classes:
            module, attribute = target.split(":", 1)
            try:
                settings_class = getattr(importlib.import_module(module), attribute)
                with _environment(values):
                    settings_class()
            except Exception as error:
                first = str(error).splitlines()[0] if str(error) else ""
                problems.append(
                    f"{name}: {attribute} does not load from its environment: "
                    f"{type(error).__name__}: {first}"
                )
    return problems


def _loopback_ports(name: str, service: Mapping[str, Any]) -> Problems:
    problems: Problems = []
    for port in service.get("ports") or []:
        text = str(port) if not isinstance(port, Mapping) else str(port.get("host_ip", ""))
        if not text.startswith("127.0.0.1:"):
            problems.append(f"{name}: port {text!r} is published beyond the loopback interface")
    return problems


def image_uid(dockerfile: str) -> str | None:
    """The uid the image's processes run as (``useradd --uid N`` in the Dockerfile)."""
    match = re.search(r"useradd\b[^\n]*--uid\s+(\d+)", dockerfile)
    return match[1] if match else None


def compose_problems(text: str, env: Mapping[str, str], *, uid: str | None = None) -> Problems:
    """Everything wrong with the compose file ``text``, run with the variables ``env``;
    ``uid``: the user of the services' image (see :func:`image_uid`)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        return [f"not YAML: {error}"]
    problems = _schema_problems(raw, "as written")
    if not isinstance(raw, dict):
        return problems or ["not a mapping"]
    problems += _secret_problems(raw)
    for variable in sorted(_secret_variables(raw)):
        missing: list[str] = []
        interpolate(raw, {k: v for k, v in env.items() if k != variable}, missing)
        if variable not in missing:
            problems.append(f"compose starts without the secret {variable} (use ${{VAR:?...}})")
    refused: list[str] = []
    document = interpolate(raw, env, refused)
    if refused:
        problems.append(f"variables required but not given: {sorted(set(refused))}")
    problems += _schema_problems(document, "interpolated")
    services = (raw.get("services") or {}) if isinstance(raw.get("services"), dict) else {}
    for name in _SERVICES:
        if name not in services:
            problems.append(f"no {name} service")
    if problems:
        return problems
    resolved: Mapping[str, Any] = document.get("services") or {}
    problems += _redis_problems(resolved["redis"])
    problems += _service_problems(resolved)
    problems += _secret_mount_problems(document, uid)
    with tempfile.TemporaryDirectory(prefix="ahp-compose-") as scratch:
        problems += _settings_problems(document, env, Path(scratch))
    problems += command_problems(resolved)
    return problems


def _secret_variables(document: Mapping[str, Any]) -> set[str]:
    """The variables secrets come from: references in secret-named environment entries,
    Redis URL passwords, ``--requirepass`` and secrets of the ``secrets`` section."""
    found: set[str] = set()
    services: Mapping[str, Any] = document.get("services") or {}
    for service in services.values():
        for key, value in env_of(service).items():
            if _SECRET_NAME.search(key):
                found.update(match["name"] for match in REFERENCE.finditer(value))
        password = flag_of(argv_of(service.get("command")), "--requirepass")
        if password:
            found.update(match["name"] for match in REFERENCE.finditer(password))
    for _, node in walk(document):
        if isinstance(node, str) and "://" in node and "@" in node:
            userinfo = node.split("://", 1)[1].split("@", 1)[0]
            found.update(match["name"] for match in REFERENCE.finditer(userinfo))
    return found


__all__ = ["compose_problems", "compose_schema", "image_uid", "interpolate"]
