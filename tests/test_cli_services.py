"""``ahp-celery api``, ``flower`` and ``redis``: their options, and the secrets they guard."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest
import redis
from typer.testing import CliRunner

from tooling.cli import app
from tooling.embedded_redis import DEFAULT_PORT, port_is_free
from tooling.services import BASIC_AUTH_ENV, check_basic_auth
from tooling.worker_process import PROJECT_ROOT, settings_environment
from wire.settings import Settings

from .support.ports import free_port

pytestmark = pytest.mark.processes

PASSWORD = "s3cret-flower-pw"


@pytest.fixture
def flower_env(settings: Settings) -> dict[str, str]:
    """This process's environment with the test deployment's settings, no Flower
    credentials."""
    merged: dict[str, str | None] = {**os.environ, **settings_environment(settings)}
    merged[BASIC_AUTH_ENV] = None
    return {key: value for key, value in merged.items() if value is not None}


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _cli(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tooling.cli", *args],
        cwd=PROJECT_ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _start_flower(
    processes: list[subprocess.Popen[str]], env: Mapping[str, str], *args: str
) -> tuple[subprocess.Popen[str], str]:
    """Start ``ahp-celery flower`` on a free port; its base URL once it answers HTTP."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tooling.cli", "flower", "--port", str(port), *args],
        cwd=PROJECT_ROOT,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.append(process)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        assert process.poll() is None, process.communicate()
        try:
            httpx.get(url + "/healthcheck", timeout=5)
            return process, url
        except httpx.TransportError:
            assert time.monotonic() < deadline, "Flower did not answer within 90 s"
            time.sleep(0.1)


def test_api_and_flower_commands_document_their_options() -> None:
    runner = CliRunner()
    api = runner.invoke(app, ["api", "--help"], env={"COLUMNS": "200"})
    assert api.exit_code == 0, api.output
    for option in ("--host", "--port", "--workers"):
        assert option in api.output
    flower = runner.invoke(app, ["flower", "--help"], env={"COLUMNS": "200"})
    assert flower.exit_code == 0, flower.output
    for option in ("--port", "--basic-auth", BASIC_AUTH_ENV, "--unauthenticated"):
        assert option in flower.output


def test_the_api_refuses_invalid_api_settings_before_serving(flower_env: dict[str, str]) -> None:
    env = {
        **flower_env,
        "AHP_API_KEEP_ALIVE": "0",
        "AHP_API_TOKENS": '{"t": ["s3cret-token-0123456789"]}',
    }
    refused = _cli(env, "api", "--port", str(free_port()))
    assert refused.returncode == 2, refused
    assert "invalid API settings" in refused.stderr
    assert "keep_alive" in refused.stderr
    assert "s3cret-token" not in refused.stderr + refused.stdout


def test_flower_refuses_to_start_without_authentication(flower_env: dict[str, str]) -> None:
    refused = _cli(flower_env, "flower", "--port", str(free_port()))
    assert refused.returncode == 2, refused
    assert "Flower needs authentication" in refused.stderr
    assert "--unauthenticated" in refused.stderr


@pytest.mark.parametrize("credentials", ["ops", f"ops:{PASSWORD},root", ":pw", "ops: "])
def test_flower_refuses_malformed_credentials_without_echoing_them(
    flower_env: dict[str, str], credentials: str
) -> None:
    with pytest.raises(ValueError, match="not 'user:password'"):
        check_basic_auth(credentials)
    refused = _cli({**flower_env, BASIC_AUTH_ENV: credentials}, "flower")
    assert refused.returncode == 2, refused
    assert "not 'user:password'" in refused.stderr
    assert PASSWORD not in refused.stdout + refused.stderr


def test_flower_refuses_credentials_together_with_unauthenticated(
    flower_env: dict[str, str],
) -> None:
    refused = _cli({**flower_env, BASIC_AUTH_ENV: f"ops:{PASSWORD}"}, "flower", "--unauthenticated")
    assert refused.returncode == 2, refused
    assert "contradicts" in refused.stderr


def test_flower_asks_for_its_credentials_and_keeps_them_off_its_command_line(
    flower_env: dict[str, str], processes: list[subprocess.Popen[str]]
) -> None:
    # Given on ahp-celery's command line, the password must not reach Flower's.
    process, url = _start_flower(processes, flower_env, "--basic-auth", f"ops:{PASSWORD}")
    assert httpx.get(url + "/workers", timeout=30).status_code == 401
    wrong = httpx.get(url + "/workers", auth=("ops", "wrong"), timeout=30)
    assert wrong.status_code == 401
    right = httpx.get(url + "/workers", auth=("ops", PASSWORD), timeout=30)
    assert right.status_code == 200
    cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode()
    assert "flower" in cmdline
    assert PASSWORD not in cmdline


def test_flower_unauthenticated_warns_and_serves_anyone(
    flower_env: dict[str, str], processes: list[subprocess.Popen[str]]
) -> None:
    process, url = _start_flower(processes, flower_env, "--unauthenticated")
    assert httpx.get(url + "/workers", timeout=30).status_code == 200
    process.terminate()
    _, stderr = process.communicate(timeout=30)
    assert "WITHOUT authentication" in stderr


def _redis_command(
    processes: list[subprocess.Popen[str]], env: dict[str, str], *args: str
) -> tuple[subprocess.Popen[str], list[str]]:
    """``ahp-celery redis`` in a process of its own, and its two banner lines."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tooling.cli", "redis", *args],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.append(process)
    assert process.stdout is not None
    return process, [process.stdout.readline(), process.stdout.readline()]


def test_redis_command_requires_the_password_from_the_environment_and_never_prints_it(
    processes: list[subprocess.Popen[str]],
) -> None:
    port = free_port()
    env = {**os.environ, "REDIS_PASSWORD": PASSWORD}
    process, banner = _redis_command(processes, env, "--port", str(port))
    assert "export REDIS_URL=redis://:$REDIS_PASSWORD@127.0.0.1" in banner[1], banner
    anonymous = redis.Redis(port=port, socket_timeout=5)
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()
    anonymous.close()
    client = redis.Redis(port=port, password=PASSWORD, socket_timeout=5)
    assert client.ping()
    client.close()
    process.terminate()
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert "Redis stopped." in stdout
    assert PASSWORD not in "".join(banner) + stdout + stderr


def test_redis_command_listens_on_6379_where_every_default_points_when_it_is_free(
    processes: list[subprocess.Popen[str]],
) -> None:
    free = port_is_free(DEFAULT_PORT)
    process, banner = _redis_command(processes, dict(os.environ))
    process.terminate()
    process.communicate(timeout=30)
    if free:
        assert "export REDIS_URL=redis://127.0.0.1:6379/0" in banner[1], banner
    else:  # taken (another Redis): a free port, said in the banner
        assert "export REDIS_URL=redis://127.0.0.1:" in banner[1], banner
        assert ":6379/" not in banner[1], banner
