"""Operator tooling around the port: the ``ahp-celery`` CLI and its demo, an embedded
Redis 8 for local runs and tests, and worker OS processes. Not part of the AHP port."""

from .embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from .errors import ToolingError
from .worker_process import WorkerProcess

__all__ = ["EmbeddedRedis", "EmbeddedRedisConfig", "ToolingError", "WorkerProcess"]
