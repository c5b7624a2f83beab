"""Keep each checkpoint thread to its latest ``AHP_CHECKPOINTS_KEPT`` checkpoints.

langgraph-checkpoint-redis stores every checkpoint as one JSON document with the whole
message history inline, and keeps them all: a session's storage grows with the square of
its turns (200 turns of 1 KB inputs: ~29 MB). After each turn, the run that holds the
session's lease prunes the thread: it keeps the latest checkpoint (the one the thread's
``checkpoint_latest`` pointer names) and its parents up to the configured number, and
deletes every older checkpoint document of the root namespace with its pending writes
(``checkpoint_write:*``) and write-registry set (``write_keys_zset:*``). Storage then
grows linearly: a few times the conversation plus a constant per session.

Safety: only the lease holder prunes, after its own writes of the turn, and the deletion
is one script that first checks the lease is still this run's (when checkpoints live in
the records' Redis; otherwise the lease is checked just before). A checkpoint that is not
older than the latest is never deleted, nor the latest or its kept parents, so a writer
that took the lease over meanwhile loses nothing it needs. (langgraph's own ``aprune``
orders by checkpoint id only, which is a worker's clock, and does not check a lease.)
"""

from __future__ import annotations

import logging
from typing import Any

from langgraph.checkpoint.redis.aio import AsyncRedisSaver
from langgraph.checkpoint.redis.key_registry import CheckpointKeyRegistry
from langgraph.checkpoint.redis.util import to_storage_safe_id, to_storage_safe_str
from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redisvl.query import FilterQuery  # type: ignore[import-untyped]
from redisvl.query.filter import Tag  # type: ignore[import-untyped]

from wire import scripts
from wire.keys import Keys
from wire.store import RecordStore

log = logging.getLogger(__name__)

_ROOT_NS = to_storage_safe_str("")
_MAX_LISTED = 10_000


class CheckpointPruner:
    """Prunes the threads of the sessions this worker runs (see the module docstring).

    Args:
        saver: The worker's checkpointer (set up: its search indexes exist).
        redis: The checkpointer's Redis client.
        store: The records (to check the lease when checkpoints live elsewhere).
        kept: Checkpoints kept per thread (at least 1: the latest).
        same_redis: Whether the checkpointer's Redis is the records' Redis (then the lease
            check and the deletion are one script).
    """

    def __init__(
        self,
        saver: AsyncRedisSaver,
        redis: Redis,
        store: RecordStore,
        kept: int,
        *,
        same_redis: bool,
    ) -> None:
        if kept < 1:
            raise ValueError(f"at least the latest checkpoint must be kept, not {kept}")
        self._saver = saver
        self._store = store
        self._kept = kept
        self._same_redis = same_redis
        self._redis = redis
        self._delete: AsyncScript = self._redis.register_script(scripts.PRUNE_CHECKPOINTS)

    @property
    def keys(self) -> Keys:
        return self._store.keys

    async def prune(self, session_id: str, lease: str) -> int:
        """Prune the session's thread under ``lease``; returns the number of keys deleted
        (0 if there was nothing to prune or the lease is no longer held)."""
        thread_id = self.keys.thread_id(session_id)
        safe_thread = to_storage_safe_id(thread_id)
        # Listed before the pointer is read: a checkpoint written in between is newer than
        # anything listed and is never chosen.
        listed = await self._saver.checkpoints_index.search(
            FilterQuery(
                filter_expression=(Tag("thread_id") == safe_thread)
                & (Tag("checkpoint_ns") == _ROOT_NS),
                return_fields=["checkpoint_id", "parent_checkpoint_id"],
                num_results=_MAX_LISTED,
            )
        )
        documents: dict[str, tuple[str, str]] = {}
        for doc in listed.docs:
            documents[str(doc.checkpoint_id)] = (str(doc.id), _field(doc, "parent_checkpoint_id"))
        if len(documents) <= self._kept:
            return 0
        latest_key = _text(await self._redis.get(self.keys.checkpoint_latest(session_id)))
        latest = latest_key.rsplit(":", 1)[-1] if latest_key else ""
        if latest not in documents:
            return 0  # no pointer yet, or written after the listing: prune next time
        chain: list[str] = []
        current = latest
        while current in documents and len(chain) < self._kept:
            chain.append(current)
            current = documents[current][1]
        evicted = [
            checkpoint_id
            for checkpoint_id in documents
            if checkpoint_id not in chain and checkpoint_id < latest
        ]
        if not evicted:
            return 0
        doomed = [documents[checkpoint_id][0] for checkpoint_id in evicted]
        doomed += [
            CheckpointKeyRegistry.make_write_keys_zset_key(thread_id, "", checkpoint_id)
            for checkpoint_id in evicted
        ]
        writes = await self._saver.checkpoint_writes_index.search(
            FilterQuery(
                filter_expression=(Tag("thread_id") == safe_thread)
                & (Tag("checkpoint_ns") == _ROOT_NS)
                & (Tag("checkpoint_id") == evicted),
                return_fields=["checkpoint_id"],
                num_results=_MAX_LISTED,
            )
        )
        doomed += [str(doc.id) for doc in writes.docs]
        lease_key = self.keys.lease(session_id)
        if self._same_redis:
            deleted = int(await self._delete(keys=[lease_key, *doomed], args=[lease]))
        elif await self._store.holds(session_id, lease):
            deleted = int(await self._redis.delete(*doomed))
        else:
            deleted = -1
        if deleted < 0:
            log.info("thread %s not pruned: the lease was taken over", thread_id)
            return 0
        return deleted


def _field(doc: Any, name: str) -> str:
    value = getattr(doc, name, "") or ""
    return "" if value == "None" else str(value)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


__all__ = ["CheckpointPruner"]
