"""Keep each checkpoint thread to its latest ``AHP_CHECKPOINTS_KEPT`` checkpoints.

langgraph-checkpoint-redis stores every checkpoint as one JSON document with the whole
message history inline, and keeps them all: a session's storage grows with the square of
its turns (200 turns of 1 KB inputs: ~23 MB by ``MEMORY USAGE``). After each turn the
run that holds the session's lease prunes the thread, so storage grows linearly (a few
times the conversation plus a constant per session; see ``bench/storage_growth.py``):

* every turn, one script (``PRUNE_CHECKPOINTS``, one round trip): from the checkpoint the
  thread's ``checkpoint_latest`` pointer names, follow the parent ids past the kept
  checkpoints and delete the older ancestors with their registered pending writes
  (``write_keys_zset:*`` lists each checkpoint's ``checkpoint_write:*`` keys);
* every ``FULL_SWEEP_EVERY``-th fence of a session, also a full sweep through the saver's
  search indexes: every root-namespace checkpoint that is neither the latest nor one of its
  kept parents, and older than the latest, goes with every write document naming it (a
  fork left by an interrupted run, writes that were never registered).

Safety: only the lease holder prunes, after its own writes of the turn; the deletion is a
script that first checks the lease is still this run's (workers refuse a checkpoint Redis
other than the records', so the check and the deletion are one atomic step). The latest
checkpoint and its kept parents are never deleted, nor anything newer than the latest, so a
run that took the lease over meanwhile loses nothing it needs. (langgraph's own ``aprune`` orders by
checkpoint id, i.e. by each worker's clock, and checks no lease.)
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
from wire.store_results import reply_text

log = logging.getLogger(__name__)

FULL_SWEEP_EVERY = 16
"""A full (search-index) sweep runs when a session's lease fence is a multiple of this."""

_ROOT_NS = to_storage_safe_str("")
_MAX_LISTED = 10_000
_MAX_DELETED_PER_TURN = 100


class CheckpointPruner:
    """Prunes the threads of the sessions this worker runs (see the module docstring).

    Args:
        saver: The worker's checkpointer (set up: its search indexes exist).
        redis: The checkpointer's Redis client.
        store: The records (their keys name the lease the scripts check).
        kept: Checkpoints kept per thread (at least 1: the latest).
    """

    def __init__(
        self,
        saver: AsyncRedisSaver,
        redis: Redis,
        store: RecordStore,
        kept: int,
    ) -> None:
        if kept < 1:
            raise ValueError(f"at least the latest checkpoint must be kept, not {kept}")
        self._saver = saver
        self._store = store
        self._kept = kept
        self._redis = redis
        self._chain: AsyncScript = redis.register_script(scripts.PRUNE_CHECKPOINTS)
        self._drop: AsyncScript = redis.register_script(scripts.DROP_CHECKPOINTS)

    @property
    def keys(self) -> Keys:
        return self._store.keys

    def chain_call(self, session_id: str, lease: str) -> tuple[str, list[str], list[Any]] | None:
        """The per-turn pruning script as ``(sha, keys, args)`` for a caller that pipelines
        it (``RecordStore.finish``); ``None`` when this fence also owes a full sweep (then
        call :meth:`prune`)."""
        if _fence_of(lease) % FULL_SWEEP_EVERY == 0:
            return None
        keys, args = self._chain_keys_args(session_id, lease)
        return str(self._chain.sha), keys, args

    def _chain_keys_args(self, session_id: str, lease: str) -> tuple[list[str], list[Any]]:
        thread = to_storage_safe_id(self.keys.thread_id(session_id))
        keys = [self.keys.lease(session_id), self.keys.checkpoint_latest(session_id)]
        args: list[Any] = [
            lease,
            self._kept,
            f"checkpoint:{thread}:{_ROOT_NS}:",
            f"write_keys_zset:{thread}:{_ROOT_NS}:",
            _MAX_DELETED_PER_TURN,
        ]
        return keys, args

    async def prune(self, session_id: str, lease: str) -> int:
        """Prune the session's thread under ``lease``; returns the number of checkpoints
        deleted (0 if there was nothing to prune or the lease is no longer held)."""
        keys, args = self._chain_keys_args(session_id, lease)
        deleted = int(await self._chain(keys=keys, args=args))
        if deleted < 0:
            log.info("session %s not pruned: the lease was taken over", session_id)
            return 0
        if _fence_of(lease) % FULL_SWEEP_EVERY == 0:
            deleted += await self.sweep(session_id, lease)
        return deleted

    async def sweep(self, session_id: str, lease: str) -> int:
        """The full sweep through the search indexes (see the module docstring); returns
        the number of checkpoints deleted."""
        thread_id = self.keys.thread_id(session_id)
        safe_thread = to_storage_safe_id(thread_id)
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
        latest_key = reply_text(await self._redis.get(self.keys.checkpoint_latest(session_id)))
        latest = latest_key.rsplit(":", 1)[-1] if latest_key else ""
        if latest not in documents:
            return 0  # no pointer yet, or written after the listing: next time
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
        if int(await self._drop(keys=[self.keys.lease(session_id), *doomed], args=[lease])) < 0:
            return 0
        return len(evicted)


def _fence_of(lease: str) -> int:
    try:
        return int(lease.split(":", 1)[0])
    except ValueError:
        return 0  # an unexpected lease shape: sweep every time (0 is a multiple)


def _field(doc: Any, name: str) -> str:
    value = getattr(doc, name, "") or ""
    return "" if value == "None" else str(value)


__all__ = ["FULL_SWEEP_EVERY", "CheckpointPruner"]
