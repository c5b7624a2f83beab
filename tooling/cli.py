"""``ahp-celery``: the command surface. Each command parses its options and hands over to
the module that does the work (``demo``, ``run``, ``services``); nothing here but commands.

The commands a user runs against a deployment are here; those that serve it (``redis``,
``worker``, ``api``, ``flower``) are in ``tooling.service_commands``. The registrations at
the end list them all, in the order ``--help`` shows them."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from wire.errors import ProfileError
from wire.modules import redact_url as redact
from wire.settings import Settings

from . import run as running
from .console import console, err, fail, load_settings
from .dead_letters import dead_letters
from .demo import DemoModel, run_demo
from .service_commands import api, flower, redis_server, worker
from .signals import sigterm_interrupts

__all__ = ["app", "main", "redact"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Agent Harness Protocol on Celery workers and Redis.",
)


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


app.command("redis")(redis_server)
app.command()(worker)
app.command("settings")(show_settings)
app.command()(demo)
app.command()(run)
app.command()(api)
app.command()(flower)
app.command("dead-letters")(dead_letters)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
