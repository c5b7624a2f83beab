"""The ``ahp-celery`` commands that serve a deployment, in the foreground: its Redis, its
workers, its HTTP API and Flower. ``tooling.cli`` registers them beside the others."""

from __future__ import annotations

import os
import signal
import sys
import threading
from enum import StrEnum
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

import typer

from wire.errors import QueueNameError
from wire.modules import redact_url as redact
from wire.queues import parse_queues, served_queues

from . import services
from .console import console, err, fail, load_settings
from .embedded_redis import DEFAULT_PORT, EmbeddedRedis, EmbeddedRedisConfig, port_is_free
from .errors import ToolingError
from .signals import children_ignore_ctrl_c
from .worker_node import NodeLayout, node_commands, run_node


class Pool(StrEnum):
    prefork = "prefork"
    solo = "solo"
    threads = "threads"


def redis_server(
    port: Annotated[
        int | None,
        typer.Option(
            help="TCP port (default: 6379, where every default URL points, if free; "
            "else a free one)."
        ),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Data directory (default: temporary, deleted).")
    ] = None,
    appendonly: Annotated[bool, typer.Option(help="Persist every write (AOF).")] = False,
    password: Annotated[
        str | None,
        typer.Option(
            envvar="REDIS_PASSWORD",
            show_envvar=True,
            show_default=False,
            help="Require this password (prefer the environment variable).",
        ),
    ] = None,
) -> None:
    """Run the embedded Redis 8 (search + JSON) in the foreground until Ctrl-C / SIGTERM."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    if port is None and port_is_free(DEFAULT_PORT):
        port = DEFAULT_PORT
    try:
        config = EmbeddedRedisConfig(
            data_dir=data_dir, port=port, appendonly=appendonly, password=password
        )
    except ValueError as error:
        raise fail(str(error), 2) from None
    server = EmbeddedRedis(config)
    try:
        try:
            with children_ignore_ctrl_c():
                url = server.start()
        except ToolingError as error:
            raise fail(str(error)) from None
        where = f"data in {server.data_dir}" + (", deleted on exit" if data_dir is None else "")
        console.print(f"Redis 8 (search + JSON) at [bold]{redact(url)}[/] ({where})")
        shown = (
            url.replace(f":{quote(password, safe='')}@", ":$REDIS_PASSWORD@") if password else url
        )
        console.print(f"Use it with: export REDIS_URL={shown}    Stop with Ctrl-C.", markup=False)
        while not stop.wait(0.5):
            if not server.running:
                raise fail(f"Redis exited; log {server.log_path}")
    finally:
        server.stop()
    console.print("Redis stopped.")


def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            "-c",
            help="Runs per process. Default: AHP_WORKER_RUNS (threads pool), "
            "AHP_WORKER_CONCURRENCY (prefork).",
        ),
    ] = None,
    pool: Annotated[
        Pool,
        typer.Option(
            "--pool",
            "-P",
            help="threads: every run of a process on its one event loop (the default); "
            "prefork: one run per child process (the old layout).",
        ),
    ] = Pool.threads,
    processes: Annotated[
        int | None,
        typer.Option(
            "--processes",
            min=1,
            help="Worker processes of this node. Default: AHP_WORKER_PROCESSES.",
        ),
    ] = None,
    loglevel: Annotated[str, typer.Option("--loglevel", "-l")] = "info",
    hostname: Annotated[
        str | None,
        typer.Option(
            "--hostname",
            "-n",
            help="Celery node name (default celery@<host>); give each worker on one host "
            "its own, e.g. worker1@%h, so Flower and remote control tell them apart. With "
            "several processes each gets a number: worker1@%h, worker2@%h...",
        ),
    ] = None,
    queues: Annotated[
        str | None,
        typer.Option(
            "--queues",
            "-Q",
            metavar="QUEUE[,QUEUE...]",
            help="Broker queues the node serves: only tasks of profiles on these queues "
            "run here. Default: AHP_WORKER_QUEUES, else AHP_QUEUE.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the worker commands and exit.")
    ] = False,
) -> None:
    """Run the Celery workers of the deployment configured by the environment (AHP_*).

    A node carries processes x runs per process at once."""
    settings = load_settings()
    try:
        served = parse_queues(queues, what="--queues") if queues is not None else ()
    except QueueNameError as error:
        raise fail(str(error), 2) from None
    if queues is not None and not served:
        raise fail("--queues names no queue (omit it to serve AHP_QUEUE)", 2)
    if concurrency is None:
        concurrency = settings.worker_concurrency if pool is Pool.prefork else settings.worker_runs
    layout = NodeLayout(
        queues=served or served_queues(settings),
        pool=pool.value,
        concurrency=concurrency,
        processes=processes if processes is not None else settings.worker_processes,
        loglevel=loglevel,
        hostname=hostname,
    )
    if dry_run:
        for command in node_commands(layout):
            console.print(" ".join(command[1:]), markup=False, highlight=False)
        return
    raise typer.Exit(run_node(layout))


def api(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes.")] = 1,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve the HTTP submit API with uvicorn (settings and tokens from the environment)."""
    load_settings()  # bad settings fail here, with the variable named, not in a worker
    if not services.api_available():
        raise fail(f"the HTTP API ({services.API_FACTORY}) is not part of this installation")
    import uvicorn
    from pydantic import ValidationError

    from harness.api.settings import ApiSettings

    try:
        api_settings = ApiSettings()
    except ValidationError as error:
        raise fail(f"invalid API settings from the environment:\n{error}", 2) from None
    uvicorn.run(
        services.API_FACTORY,
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        **api_settings.uvicorn_options(),
    )


def flower(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 5555,
    basic_auth: Annotated[
        str | None,
        typer.Option(
            envvar=services.BASIC_AUTH_ENV,
            show_envvar=True,
            show_default=False,
            metavar="USER:PASSWORD[,...]",
            help="Credentials Flower asks for; prefer the environment variable "
            "(a command line is visible to every local user).",
        ),
    ] = None,
    unauthenticated: Annotated[
        bool,
        typer.Option(
            "--unauthenticated",
            help="Run without authentication: anyone who reaches the port can see task "
            "arguments and revoke or terminate tasks.",
        ),
    ] = False,
    url_prefix: Annotated[
        str | None, typer.Option(help="Serve under this path (behind a reverse proxy).")
    ] = None,
) -> None:
    """Run Flower on the deployment's broker (authenticated unless --unauthenticated)."""
    if basic_auth is not None and unauthenticated:
        raise fail(
            f"--unauthenticated contradicts the credentials given ({services.BASIC_AUTH_ENV})", 2
        )
    if basic_auth is None and not unauthenticated:
        raise fail(
            "Flower needs authentication: set FLOWER_BASIC_AUTH=user:password (or "
            "--basic-auth), or pass --unauthenticated explicitly",
            2,
        )
    if basic_auth is not None:
        try:
            services.check_basic_auth(basic_auth)
        except ValueError as error:
            raise fail(f"{services.BASIC_AUTH_ENV}: {error}", 2) from None
    else:
        err.print(
            "[bold yellow]warning:[/] Flower runs WITHOUT authentication: anyone who can "
            f"reach {host}:{port} sees task arguments and can revoke or terminate tasks.",
            markup=True,
        )
    settings = load_settings()
    console.print(
        f"Flower on http://{host}:{port}{url_prefix or ''} for the broker "
        f"{redact(settings.effective_broker_url)}"
    )
    sys.stdout.flush()
    sys.stderr.flush()
    command = services.flower_command(host, port, url_prefix)
    os.execve(sys.executable, command, services.flower_environment(basic_auth))


__all__ = ["Pool", "api", "flower", "redis_server", "worker"]
