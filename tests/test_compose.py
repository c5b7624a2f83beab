"""compose.yaml deploys what this package is, with no secret in it (see compose_check).

No container engine runs here: the file is validated against the Compose specification's
JSON Schema and its commands against the package. The checker itself is shown to fail on
broken copies of the file, each breaking one rule.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest
import yaml

from tooling.worker_process import PROJECT_ROOT

from .support.compose_check import compose_problems, image_uid

COMPOSE = PROJECT_ROOT / "compose.yaml"
ENV = {
    "REDIS_PASSWORD": uuid4().hex,
    "FLOWER_BASIC_AUTH": f"admin:{uuid4().hex}",
    "AHP_API_TOKENS": json.dumps({"acme": uuid4().hex}),
}
UID = image_uid((PROJECT_ROOT / "Dockerfile").read_text(encoding="utf-8"))


def _problems(text: str, env: dict[str, str] = ENV) -> list[str]:
    return compose_problems(text, env, uid=UID)


def _text() -> str:
    return COMPOSE.read_text(encoding="utf-8")


def test_compose_yaml_has_no_problem() -> None:
    assert _problems(_text()) == []


def test_check_jsonschema_accepts_compose_yaml() -> None:
    """The same schema through check-jsonschema's own command, as CI can run it."""
    command = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
    result = subprocess.run(
        [*command, str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_refuses_to_start_without_each_secret() -> None:
    for name in ("REDIS_PASSWORD", "FLOWER_BASIC_AUTH"):
        problems = _problems(_text(), {k: v for k, v in ENV.items() if k != name})
        assert any(name in problem for problem in problems), (name, problems)


Mutation = Callable[[dict[str, Any]], None]


def _set_env(service: str, key: str, value: str) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        environment = document["services"][service].setdefault("environment", {})
        if not isinstance(environment, dict):  # the shared anchor: copy it
            environment = {}
        document["services"][service]["environment"] = {**environment, key: value}

    return mutate


def _drop_env(service: str, key: str) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        environment = dict(document["services"][service].get("environment") or {})
        environment.pop(key, None)
        document["services"][service]["environment"] = environment

    return mutate


def _redis_args(replace: Callable[[list[str]], list[str]]) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        redis = document["services"]["redis"]
        redis["command"] = replace([str(arg) for arg in redis["command"]])

    return mutate


def _swap(old: str, new: str) -> Callable[[list[str]], list[str]]:
    return lambda args: [new if arg == old else arg for arg in args]


def _without_flag(flag: str) -> Callable[[list[str]], list[str]]:
    def drop(args: list[str]) -> list[str]:
        index = args.index(flag)
        return args[:index] + args[index + 2 :]

    return drop


def _command(service: str, command: list[str]) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        document["services"][service]["command"] = command

    return mutate


def _set(service: str, key: str, value: object) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        document["services"][service][key] = value

    return mutate


def _drop(service: str, key: str) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        document["services"][service].pop(key)

    return mutate


def _rename_key(service: str, old: str, new: str) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        body = document["services"][service]
        body[new] = body.pop(old)

    return mutate


def _drop_service(name: str) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        document["services"].pop(name)

    return mutate


_LITERAL_URL = "redis://:hunter2hunter2@redis:6379/0"
_DEFAULTED_URL = "redis://:${REDIS_PASSWORD:-changeme}@redis:6379/0"

MUTATIONS: dict[str, tuple[Mutation, str]] = {
    "a password literal in REDIS_URL": (
        _set_env("worker", "REDIS_URL", _LITERAL_URL),
        r"password is a literal",
    ),
    "a password with a default value": (
        _set_env("api", "REDIS_URL", _DEFAULTED_URL),
        r"password is a literal|starts without the secret",
    ),
    "a Redis URL without the password": (
        _set_env("flower", "REDIS_URL", "redis://redis:6379/0"),
        r"flower: REDIS_URL lacks the Redis password",
    ),
    "a literal requirepass": (
        _redis_args(_swap("${REDIS_PASSWORD:?set REDIS_PASSWORD}", "hunter2")),
        r"--requirepass takes a literal",
    ),
    "no requirepass": (
        _redis_args(_without_flag("--requirepass")),
        r"redis: no password",
    ),
    "an evicting Redis": (
        _redis_args(_swap("noeviction", "allkeys-lru")),
        r"noeviction is missing",
    ),
    "no append-only file": (
        _redis_args(_swap("yes", "no")),
        r"--appendonly yes is missing",
    ),
    "Redis 7": (_set("redis", "image", "redis:7.2"), r"not Redis 8"),
    "no Redis healthcheck": (_drop("redis", "healthcheck"), r"no healthcheck"),
    "a healthcheck without the password": (
        _drop_env("redis", "REDISCLI_AUTH"),
        r"healthcheck has no password",
    ),
    "a literal Flower password": (
        _set_env("flower", "FLOWER_BASIC_AUTH", "admin:admin"),
        r"FLOWER_BASIC_AUTH must be a required reference",
    ),
    "Flower without authentication": (
        _drop_env("flower", "FLOWER_BASIC_AUTH"),
        r"flower: no authentication",
    ),
    "Flower's API opened": (
        _set_env("flower", "FLOWER_UNAUTHENTICATED_API", "true"),
        r"FLOWER_UNAUTHENTICATED_API",
    ),
    "a literal API token": (
        _set_env("api", "AHP_API_TOKENS", '{"acme": "0123456789abcdef0123"}'),
        r"AHP_API_TOKENS must be a required reference",
    ),
    "a worker with a container name": (
        _set("worker", "container_name", "ahp-worker"),
        r"container_name prevents --scale",
    ),
    "a worker with a host port": (
        _set("worker", "ports", ["127.0.0.1:9000:9000"]),
        r"host port prevents --scale",
    ),
    "Flower published on every interface": (
        _set("flower", "ports", ["5555:5555"]),
        r"published beyond the loopback",
    ),
    "an unknown subcommand": (
        _command("worker", ["ahp-celery", "serve"]),
        r"no subcommand 'serve'",
    ),
    "an unknown option": (
        _command("worker", ["ahp-celery", "worker", "--concurency", "2"]),
        r"--concurency",
    ),
    "a Celery app that does not import": (
        _command("worker", ["celery", "-A", "workers.mian", "worker"]),
        r"ModuleNotFoundError",
    ),
    "a program the image lacks": (
        _set("worker", "healthcheck", {"test": ["CMD-SHELL", "curl -f http://x/"]}),
        r"'curl' is not a program",
    ),
    "a healthcheck on another port": (
        _set(
            "flower",
            "healthcheck",
            {
                "test": [
                    "CMD",
                    "python",
                    "-c",
                    "import urllib.request; "
                    "urllib.request.urlopen('http://127.0.0.1:5556/healthcheck')",
                ]
            },
        ),
        r"probes port 5556",
    ),
    "a healthcheck of a path Flower does not serve": (
        _set(
            "flower",
            "healthcheck",
            {
                "test": [
                    "CMD",
                    "python",
                    "-c",
                    "import urllib.request; urllib.request.urlopen('http://127.0.0.1:5555/health')",
                ]
            },
        ),
        r"probes /health, which it does not serve",
    ),
    "a secret the image's user cannot read": (
        _set("api", "secrets", ["ahp_api_tokens"]),
        r"not owned by the image's user",
    ),
    "a tokens file that is not mounted": (
        _drop("api", "secrets"),
        r"AHP_API_TOKENS_FILE names /run/secrets/ahp_api_tokens, which is not mounted",
    ),
    "a setting that does not parse": (
        _set_env("worker", "AHP_LEASE_TTL", "six seconds"),
        r"worker: Settings does not load from its environment",
    ),
    "a misspelt key": (_rename_key("worker", "command", "comand"), r"schema"),
    "a missing service": (_drop_service("flower"), r"no flower service"),
}


@pytest.mark.parametrize("broken", sorted(MUTATIONS))
def test_the_checker_finds_a_broken_copy(broken: str) -> None:
    mutate, expected = MUTATIONS[broken]
    document = yaml.safe_load(_text())
    mutate(document)
    text = yaml.safe_dump(document, sort_keys=False)
    problems = _problems(text)
    assert any(re.search(expected, problem) for problem in problems), problems


def test_the_dump_of_an_unbroken_copy_has_no_problem() -> None:
    """The mutations above go through a YAML round trip: it alone breaks nothing."""
    text = yaml.safe_dump(yaml.safe_load(_text()), sort_keys=False)
    assert _problems(text) == []


def test_no_secret_looking_literal_anywhere_in_the_file() -> None:
    """Belt and braces over the structured checks: nothing that looks like a credential."""
    text = _text()
    assert not re.search(r"redis://:[^$@\s]+@", text)


def test_the_image_user_is_known() -> None:
    assert UID == "10001"


def test_the_files_compose_reads_stay_out_of_the_image() -> None:
    ignored = (PROJECT_ROOT / ".dockerignore").read_text().split()
    assert ".env" in ignored
    assert ".env" in (PROJECT_ROOT / ".gitignore").read_text().split()
