"""What a deployment namespace holds in Redis, read by the tests."""

from __future__ import annotations

import redis

from wire.keys import Keys


def namespace_keys(client: redis.Redis, namespace: str) -> set[str]:
    """Every key of ``namespace`` (``<namespace>:*``)."""
    return {str(key) for key in client.scan_iter(match=f"{namespace}:*", count=1000)}


def event_kinds(client: redis.Redis, namespace: str, task_id: str) -> list[str]:
    """The kind (``t`` field) of each entry of a task's event stream, in order."""
    entries = client.xrange(Keys(namespace).events(task_id))
    return [str(fields.get("t")) for _, fields in entries]  # type: ignore[union-attr]


def terminal_entries(client: redis.Redis, namespace: str, task_id: str) -> int:
    """How many terminal entries a task's event stream holds (exactly one once settled)."""
    return event_kinds(client, namespace, task_id).count("terminal")


def task_record(client: redis.Redis, namespace: str, task_id: str) -> dict[str, str]:
    """A task's record hash."""
    return dict(client.hgetall(Keys(namespace).task(task_id)))  # type: ignore[arg-type]
