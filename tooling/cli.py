"""``ahp-celery``: the command surface. Each command parses its options and hands over to
the module that does the work (``demo``, ...); nothing here but commands."""

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

import typer
from rich.table import Table

from wire.modules import redact_url as redact
from wire.settings import Settings

from .console import console, err, fail, load_settings
from .demo import run_demo
from .embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from .errors import ToolingError
from .signals import children_ignore_ctrl_c, sigterm_interrupts

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
    port: Annotated[int | None, typer.Option(help="TCP port (default: a free one).")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Data directory (default: temporary, deleted).")
    ] = None,
    appendonly: Annotated[bool, typer.Option(help="Persist every write (AOF).")] = False,
) -> None:
    """Run the embedded Redis 8 (search + JSON) in the foreground until Ctrl-C / SIGTERM."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    server = EmbeddedRedis(EmbeddedRedisConfig(data_dir=data_dir, port=port, appendonly=appendonly))
    try:
        try:
            with children_ignore_ctrl_c():
                url = server.start()
        except ToolingError as error:
            raise fail(str(error)) from None
        where = f"data in {server.data_dir}" + (", deleted on exit" if data_dir is None else "")
        console.print(f"Redis 8 (search + JSON) at [bold]{url}[/] ({where})")
        console.print(f"Use it with: export REDIS_URL={url}    Stop with Ctrl-C.")
        while not stop.wait(0.5):
            if not server.running:
                raise fail(f"Redis exited; log {server.log_path}")
    finally:
        server.stop()
    console.print("Redis stopped.")


@app.command()
def worker(
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", help="Default: AHP_WORKER_CONCURRENCY.")
    ] = None,
    pool: Annotated[Pool, typer.Option("--pool", "-P")] = Pool.prefork,
    loglevel: Annotated[str, typer.Option("--loglevel", "-l")] = "info",
) -> None:
    """Run a Celery worker of the deployment configured by the environment (AHP_*)."""
    settings = load_settings()
    size = concurrency if concurrency is not None else settings.worker_concurrency
    args = [sys.executable, "-m", "celery", "-A", "workers.main", "worker"]
    args += ["-Q", settings.queue, "-c", str(size), "-P", pool.value, "-E"]
    args += ["--loglevel", loglevel]
    sys.stdout.flush()
    os.execv(sys.executable, args)


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
    for name, value in values.items():
        shown = redact(value) if isinstance(value, str) else value
        if isinstance(value, timedelta):
            shown = f"{value.total_seconds():g} s"
        env = f"AHP_{name.upper()}" if name in Settings.model_fields else "(derived)"
        table.add_row(name, env, "-" if shown is None else str(shown))
    console.print(table, soft_wrap=False)


@app.command()
def demo(
    redis_url: Annotated[
        str | None,
        typer.Option(help="Redis 8 / Redis Stack URL (default: REDIS_URL, else embedded)."),
    ] = None,
) -> None:
    """One worker process, one session, two tasks, every event printed as it arrives."""
    sigterm_interrupts()
    try:
        run_demo(redis_url)
    except (KeyboardInterrupt, asyncio.CancelledError):
        err.print("Interrupted; the session, the worker and any embedded Redis were stopped.")
        raise typer.Exit(130) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
