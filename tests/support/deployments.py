"""A deployment of its own for tests that stop, fill or restart their Redis: an embedded
append-only Redis 8 and settings naming a fresh namespace and queue on it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import uuid4

from tooling.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from wire.settings import Settings


@contextmanager
def append_only_redis(data_dir: Path) -> Iterator[EmbeddedRedis]:
    """A running Redis whose data (append-only file in ``data_dir``) survives restarts."""
    server = EmbeddedRedis(EmbeddedRedisConfig(data_dir=data_dir, appendonly=True))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def own_deployment(redis_url: str, name: str, **overrides: Any) -> Settings:
    """Settings of a deployment of its own on ``redis_url`` (namespace and queue named
    ``name`` plus a random suffix), with the test profile registry."""
    suffix = uuid4().hex[:8]
    return Settings(
        redis_url=redis_url,
        broker_url=None,
        checkpoint_url=None,
        namespace=f"{name}-{suffix}",
        queue=f"ahp.{name}.{suffix}",
        profiles="tests.support.profiles:PROFILES",
        profile="confirmed",
        **overrides,
    )
