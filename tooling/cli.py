"""``ahp-celery``: the command surface. Each command parses its options and hands over to
the module that does the work (``demo``, ``run``, ``services``); nothing here but commands."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

import typer
from rich.table import Table

from wire.errors import ProfileError
from wire.modules import redact_url as redact
from wire.settings import Settings

from . import run as running
from . import services
from .console import console, err, fail, load_settings
from .demo import DemoModel, run_demo
from .embedded_redis import DEFAULT_PORT, EmbeddedRedis, EmbeddedRedisConfig, port_is_free
from .errors import ToolingError
from .signals import children_ignore_ctrl_c, sigterm_interrupts
from .worker_node import NodeLayout, node_commands, run_node

__all__ = ["app", "main", "redact"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Agent Harness Protocol on Celery workers and Redis.",
)


class Pool(StrEnum):
    prefork = "prefork"
    solo = "solo"
    threads = "threads"


@app.command("redis")
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


@app.command()
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
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the worker commands and exit.")
    ] = False,
) -> None:
    """Run the Celery workers of the deployment configured by the environment (AHP_*).

    A node carries processes x runs per process at once."""
    settings = load_settings()
    if concurrency is None:
        concurrency = settings.worker_concurrency if pool is Pool.prefork else settings.worker_runs
    layout = NodeLayout(
        queue=settings.queue,
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


@app.command("settings")
def show_settings() -> None:
    """Print the effective settings (from the environment), passwords redacted."""
    settings = load_settings()
    table = Table(title="Effective settings", show_lines=False)
    table.add_column("setting", style="bold", overflow="fold")
    table.add_column("environment variable", overflow="fold")
    table.add_column("value", overflow="fold")
    values: dict[str, object] = settings.model_dump()
    values["effective_broker_url"] = settings.effective_broker_url
    values["effective_checkpoint_url"] = settings.effective_checkpoint_url
    rows: list[tuple[str, str, str]] = []
    for name, value in values.items():
        shown = redact(value) if isinstance(value, str) else value
        if isinstance(value, timedelta):
            shown = f"{value.total_seconds():g} s"
        env = f"AHP_{name.upper()}" if name in Settings.model_fields else "(derived)"
        rows.append((name, env, "-" if shown is None else str(shown)))
    if not sys.stdout.isatty():
        # Piped or captured: one plain line per setting, never wrapped mid-value.
        for name, env, shown in rows:
            typer.echo(f"{env}={shown}" if env != "(derived)" else f"# {name}={shown}")
        return
    for row in rows:
        table.add_row(*row)
    console.print(table, soft_wrap=False)


@app.command()
def demo(
    redis_url: Annotated[
        str | None,
        typer.Option(help="Redis 8 / Redis Stack URL (default: REDIS_URL, else embedded)."),
    ] = None,
    model: Annotated[
        DemoModel,
        typer.Option(
            help="scripted: a scripted stand-in (default); local: SmolLM2 offline "
            "(needs the 'local' extra)."
        ),
    ] = DemoModel.SCRIPTED,
    approve: Annotated[
        bool | None,
        typer.Option(
            "--approve/--decline",
            help="Answer every approval without asking: approve once, or decline "
            "(default: ask at the terminal; without a terminal, approve once).",
        ),
    ] = None,
    notes_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where the approved save_note calls write notes.txt "
            "(default: a temporary directory, deleted at the end)."
        ),
    ] = None,
) -> None:
    """Run the demo agent: one worker, one session, two tasks, every event printed.

    Each task goes through the demo agent's pipeline: a tool call, an approval and a
    pipeline step."""
    sigterm_interrupts()
    try:
        run_demo(redis_url, model, approve, notes_dir)
    except (KeyboardInterrupt, asyncio.CancelledError):
        err.print("Interrupted; the session, the worker and any embedded Redis were stopped.")
        raise typer.Exit(130) from None


@app.command()
def run(
    prompt: Annotated[str, typer.Argument(help="The task's input text.")],
    session_id: Annotated[
        str | None,
        typer.Option("--session-id", help="Continue this persistent session (default: a new one)."),
    ] = None,
    instructions: Annotated[
        str | None, typer.Option(help="Instructions of the new session.")
    ] = None,
    persistent: Annotated[
        bool, typer.Option(help="Make the new session persistent (continue it with --session-id).")
    ] = False,
    enqueue: Annotated[
        bool, typer.Option(help="On a busy session, queue behind its task instead of failing.")
    ] = False,
    profile: Annotated[
        str | None, typer.Option(help="Agent profile (default: AHP_PROFILE).")
    ] = None,
    tenant: Annotated[
        str | None, typer.Option(help="Tenant owning the new session / the continued one.")
    ] = None,
    metadata: Annotated[
        list[str] | None,
        typer.Option(
            "--metadata", "-m", metavar="KEY=VALUE", help="Run metadata label (repeatable)."
        ),
    ] = None,
    json_lines: Annotated[
        bool, typer.Option("--json", help="One JSON object per line: events, then the outcome.")
    ] = False,
    interactive: Annotated[
        bool | None,
        typer.Option(
            "--interactive/--no-interactive",
            help="Ask for approvals and answers (default: when stdin is a terminal); "
            "otherwise approvals are declined and a question cancels the task.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run one task on the deployment's workers and follow it live; Ctrl-C cancels it.

    Exit codes:
    0 completed,
    1 failed,
    2 bad options or settings,
    3 cancelled,
    4 unresolved,
    5 not started (unknown, busy or blocked session, incompatible request, no Redis),
    6 start unconfirmed (the task may still run),
    130 stopped waiting (a second Ctrl-C).
    """
    if session_id is not None and (instructions is not None or persistent):
        raise fail("--instructions and --persistent configure a new session, not --session-id", 2)
    labels: dict[str, str] = {}
    for item in metadata or []:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise fail(f"--metadata {item!r} is not KEY=VALUE", 2)
        labels[key.strip()] = value
    request = running.RunRequest(
        prompt=prompt,
        session_id=session_id,
        instructions=instructions,
        persistent=persistent,
        profile=profile,
        metadata=labels,
        interactive=sys.stdin.isatty() if interactive is None else interactive,
        tenant=tenant,
        enqueue=enqueue,
    )
    settings = load_settings()
    try:
        code = running.run(settings, request, json_lines=json_lines)
    except ProfileError as error:
        raise fail(str(error), running.ExitCode.USAGE) from None
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise typer.Exit(running.ExitCode.INTERRUPTED) from None
    raise typer.Exit(code)


@app.command()
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


@app.command()
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
