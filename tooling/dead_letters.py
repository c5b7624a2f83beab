"""``ahp-celery dead-letters``: the deployment's dead letters (``wire.dead_letters``), read
from Redis directly: every tenant's and the malformed messages, as an operator sees them.

Exit codes: 0 listed (also when there are none), 2 bad options or settings, 5 Redis could
not be read."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer
from redis.asyncio import Redis
from redis.exceptions import RedisError
from rich.table import Table

from wire.dead_letters import DeadLetter, DeadLetterKind, DeadLetterPage, read_dead_letters
from wire.keys import Keys
from wire.modules import redact_url
from wire.redis_options import pool_options
from wire.settings import Settings

from .console import console, fail, load_settings

NO_REDIS = 5


async def _read(
    settings: Settings, tenant: str | None, kind: DeadLetterKind | None, limit: int
) -> DeadLetterPage:
    client = Redis.from_url(
        settings.redis_url,
        decode_responses=True,
        socket_timeout=5,
        socket_connect_timeout=5,
        **pool_options(),
    )
    try:
        return await read_dead_letters(
            client,
            Keys(settings.namespace),
            settings.task_retention,
            tenant=tenant,
            kind=kind,
            limit=limit,
        )
    finally:
        await client.aclose()


def as_json(letter: DeadLetter) -> dict[str, Any]:
    """The dead letter as the API answers it."""
    shown: dict[str, Any] = letter.model_dump(mode="json")
    return shown


def dead_letters(
    tenant: Annotated[
        str | None, typer.Option(help="Only this tenant's tasks (malformed messages have none).")
    ] = None,
    kind: Annotated[DeadLetterKind | None, typer.Option(help="Only this kind.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 100,
    json_lines: Annotated[
        bool, typer.Option("--json", help="One JSON object per line, newest first.")
    ] = False,
) -> None:
    """List the dead letters of the last AHP_TASK_RETENTION: tasks failed after their
    worker was lost AHP_MAX_DELIVERIES times, and malformed messages dropped from the
    queue (their id and cause; never their content)."""
    settings = load_settings()
    try:
        page = asyncio.run(_read(settings, tenant, kind, limit))
    except (RedisError, OSError) as error:
        where = redact_url(settings.redis_url)
        raise fail(f"the dead letters could not be read from {where}: {error}", NO_REDIS) from None
    if json_lines:
        for letter in page.letters:
            typer.echo(json.dumps(as_json(letter)))
        return
    if not page.letters:
        console.print("No dead letters.")
        return
    table = Table(title=f"Dead letters of {settings.namespace}, newest first")
    for column in ("at (UTC)", "kind", "task", "session", "tenant", "queue", "message", "cause"):
        table.add_column(column, overflow="fold")
    for letter in page.letters:
        table.add_row(
            letter.at.strftime("%Y-%m-%d %H:%M:%S"),
            letter.kind.value,
            letter.task_id or "-",
            letter.session_id or "-",
            letter.tenant or "-",
            letter.queue or "-",
            letter.message_id or "-",
            letter.cause,
        )
    console.print(table)
    if page.next_before is not None:
        console.print(f"(more than {limit}; raise --limit to see older ones)")


__all__ = ["as_json", "dead_letters"]
