"""``ahp-celery``: run a local Redis, run workers, run the demo, show the settings.

``ahp-celery demo`` is the one-command tour: an embedded Redis (unless ``--redis-url`` /
``REDIS_URL`` names one), one worker as a separate OS process, and one session with two
tasks whose events stream live.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated
from uuid import uuid4

import redis
import typer
from agent_harness_protocol import (
    AgentSession,
    AgentUsage,
    Completed,
    MessageCompleted,
    MessageDelta,
    SessionSpec,
    TaskEvent,
    TaskOutcome,
    TaskRequest,
    TaskStarted,
    TerminalEvent,
    TextInput,
    TextOutput,
    UsageChanged,
)
from pydantic import ValidationError
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from harness import CeleryHarness
from wire.modules import missing_modules_sync
from wire.modules import redact_url as redact
from wire.settings import Settings

from .embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from .errors import ToolingError
from .worker_process import WorkerProcess

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Agent Harness Protocol on Celery workers and Redis.",
)
# soft_wrap: streamed model text and URLs are never broken by inserted newlines.
console = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)

QUESTIONS = ("What is the capital of France?", "And what did I ask you before?")
TASK_TIMEOUT = 60.0
CLEANUP_TIMEOUT = 10.0


class Pool(StrEnum):
    prefork = "prefork"
    solo = "solo"
    threads = "threads"


def _fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", markup=True)
    return typer.Exit(code)


def _signals_interrupt() -> None:
    """Treat SIGTERM like Ctrl-C (asyncio cancels the main task; ``finally`` cleans up)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    signal.signal(signal.SIGTERM, interrupt)


@contextmanager
def _children_ignore_ctrl_c() -> Iterator[None]:
    """Processes spawned inside start with SIGINT blocked: a Ctrl-C in the terminal hits the
    whole process group, but Redis must stay up until this process stops it (SIGTERM)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _load_settings(**overrides: object) -> Settings:
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        raise _fail(f"invalid settings from the environment:\n{error}", 2) from None


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
            with _children_ignore_ctrl_c():
                url = server.start()
        except ToolingError as error:
            raise _fail(str(error)) from None
        where = f"data in {server.data_dir}" + (", deleted on exit" if data_dir is None else "")
        console.print(f"Redis 8 (search + JSON) at [bold]{url}[/] ({where})")
        console.print(f"Use it with: export REDIS_URL={url}    Stop with Ctrl-C.")
        while not stop.wait(0.5):
            if not server.running:
                raise _fail(f"Redis exited; log {server.log_path}")
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
    settings = _load_settings()
    size = concurrency if concurrency is not None else settings.worker_concurrency
    args = [sys.executable, "-m", "celery", "-A", "workers.main", "worker"]
    args += ["-Q", settings.queue, "-c", str(size), "-P", pool.value, "-E"]
    args += ["--loglevel", loglevel]
    sys.stdout.flush()
    os.execv(sys.executable, args)


@app.command("settings")
def show_settings() -> None:
    """Print the effective settings (from the environment), passwords redacted."""
    settings = _load_settings()
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


# -- demo --------------------------------------------------------------------------------


def _check_redis(url: str) -> None:
    client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=5)
    try:
        missing = missing_modules_sync(client, url)  # the Query Engine and JSON
    except redis.RedisError as error:
        raise _fail(f"cannot reach Redis at {redact(url)}: {error}", 2) from None
    finally:
        client.close()
    if missing is not None:
        raise _fail(missing)


def _usage(usage: AgentUsage | None) -> str:
    if usage is None:
        return "not reported"
    parts = [
        f"{label}={value}"
        for label, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("total", usage.total_tokens),
        )
        if value is not None
    ]
    return " ".join(parts) or "unknown"


def _print_event(event: TaskEvent, streaming: bool) -> bool:
    """Print one event; returns whether a message is being streamed inline."""
    if isinstance(event, MessageDelta):
        if not streaming:
            console.print("  [cyan]MessageDelta[/]   ", end="")
        console.print(event.text, end="", markup=False)
        return True
    if streaming:
        console.print()
    if isinstance(event, TaskStarted):
        console.print(f"  [cyan]TaskStarted[/]    task {event.task_id.value}")
    elif isinstance(event, MessageCompleted):
        console.print(f"  [cyan]MessageCompleted[/] ({len(event.text)} characters)")
    elif isinstance(event, UsageChanged):
        line = f"task {_usage(event.task)}, session {_usage(event.session)}"
        console.print(f"  [cyan]UsageChanged[/]   {line}")
    elif isinstance(event, TerminalEvent):
        console.print(f"  [bold cyan]{type(event).__name__}[/]")
    else:
        console.print(f"  {type(event).__name__} {event}", markup=False)
    return False


def _print_outcome(outcome: TaskOutcome) -> None:
    kind = type(outcome).__name__
    style = "green" if isinstance(outcome, Completed) else "red"
    detail = (
        f" (stop reason: {outcome.stop_reason.value})" if isinstance(outcome, Completed) else ""
    )
    console.print(f"Outcome: [bold {style}]{kind}[/]{detail}")
    output = outcome.output.text if isinstance(outcome.output, TextOutput) else outcome.output
    console.print("  output:         ", end="")
    console.print(str(output), markup=False)
    if not isinstance(outcome, Completed):
        console.print(f"  details:        {outcome}", markup=False)
    console.print(f"  usage:          {_usage(outcome.usage)}")
    console.print(f"  session usage:  {_usage(outcome.session_usage)}")


class _Interrupt:
    """Ctrl-C (and SIGTERM, forwarded as SIGINT) while the conversation runs: cancel the main
    task. redis-py can swallow a cancellation that lands while a command is in flight, so
    ``check()`` between the steps raises ``KeyboardInterrupt`` too."""

    def __init__(self) -> None:
        self.requested = False
        self._task = asyncio.current_task()
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._on_signal)

    def _on_signal(self) -> None:
        self.requested = True
        if self._task is not None:
            self._task.cancel()

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


async def _ask(session: AgentSession, question: str, interrupt: _Interrupt) -> bool:
    """Run one task, printing its events live and then its outcome; whether it completed."""
    console.rule()
    console.print(f"[bold]You:[/] {question}")
    task = await session.start_task(TaskRequest(TextInput(question)))
    events = task.events()  # subscribed before any event can arrive
    interrupt.check()
    streaming = False
    try:
        async with asyncio.timeout(TASK_TIMEOUT):
            async for event in events:
                streaming = _print_event(event, streaming)
                interrupt.check()
            outcome = await task.await_outcome()
    except TimeoutError:
        await task.request_cancellation()
        raise _fail(f"task {task.id.value} did not settle in {TASK_TIMEOUT:g} s") from None
    _print_outcome(outcome)
    return isinstance(outcome, Completed)


async def _cleanup(harness: CeleryHarness, session: AgentSession | None) -> bool:
    """Release the session and close the harness, bounded: a lost Redis must not hang the exit."""
    try:
        async with asyncio.timeout(CLEANUP_TIMEOUT):
            if session is not None:
                await session.release()
                console.print(f"Session {session.id.value} released.")
            await harness.aclose()
        return True
    except TimeoutError:
        err.print(f"cleanup did not finish within {CLEANUP_TIMEOUT:g} s")
    except Exception as error:
        err.print(f"cleanup failed: {type(error).__name__}: {error}", markup=False)
    return False


async def _converse(settings: Settings) -> bool:
    harness = CeleryHarness(settings, profile="scripted")
    session: AgentSession | None = None
    completed = False
    interrupt = _Interrupt()
    try:
        session = await harness.create_session(SessionSpec(instructions="Answer briefly."))
        console.print(f"Session {session.id.value} created (instructions: 'Answer briefly.')")
        interrupt.check()
        completed = all([await _ask(session, question, interrupt) for question in QUESTIONS])
    except asyncio.CancelledError:
        if not interrupt.requested:
            raise
        raise KeyboardInterrupt from None
    finally:
        cleaned = await _cleanup(harness, session)
    return completed and cleaned


@app.command()
def demo(
    redis_url: Annotated[
        str | None,
        typer.Option(help="Redis 8 / Redis Stack URL (default: REDIS_URL, else embedded)."),
    ] = None,
) -> None:
    """One worker process, one session, two tasks, every event printed as it arrives."""
    _signals_interrupt()
    try:
        _demo(redis_url)
    except (KeyboardInterrupt, asyncio.CancelledError):
        err.print("Interrupted; the session, the worker and any embedded Redis were stopped.")
        raise typer.Exit(130) from None


def _demo(redis_url: str | None) -> None:
    began = time.monotonic()
    console.print(
        Panel(
            "The model in this demo is workers.scripted_model:ScriptedChatModel, a "
            "[bold]scripted stand-in, not a real LLM[/]: it quotes the questions of the "
            "session, to show that the second task sees the first.",
            title="AHP on Celery: demo",
        ),
        soft_wrap=False,
    )
    url = redis_url or os.environ.get("AHP_REDIS_URL") or os.environ.get("REDIS_URL")
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ahp-demo-")))
        if url is None:
            server = EmbeddedRedis()
            try:
                with _children_ignore_ctrl_c():
                    url = server.start()
            except ToolingError as error:
                raise _fail(str(error), 2) from None
            stack.callback(server.stop)
            console.print(f"Embedded Redis 8 started at {url}")
        else:
            console.print(f"Using Redis at {redact(url)}")
        _check_redis(url)
        suffix = uuid4().hex[:8]
        settings = _load_settings(
            redis_url=url,
            namespace=f"demo-{suffix}",
            queue=f"ahp.demo.{suffix}",
            profiles="wire.default_profiles:PROFILES",
            profile="scripted",
        )
        process = WorkerProcess(
            settings, 2, "prefork", loglevel="warning", log_path=workdir / "worker.log"
        )
        stack.callback(process.stop, timedelta(seconds=15))
        console.print(f"Starting worker {process.hostname} (prefork, 2 processes) ...")
        try:
            process.start(timedelta(seconds=60))
        except ToolingError as error:
            raise _fail(str(error)) from None
        console.print(f"Worker ready (pid {process.pid}, queue {settings.queue}).")
        try:
            completed = asyncio.run(_converse(settings))
        except typer.Exit:
            err.print(f"worker log tail:\n{process.log_tail()}", markup=False)
            raise
        except Exception as error:
            if not isinstance(error, redis.RedisError):
                err.print_exception()
            err.print(f"worker log tail:\n{process.log_tail()}", markup=False)
            raise _fail(f"the demo failed: {type(error).__name__}: {error}") from None
        console.rule()
        console.print("Stopping the worker and Redis ...")
    console.print(f"Demo finished in {time.monotonic() - began:.1f} s.")
    if not completed:
        raise _fail("a task did not complete")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
