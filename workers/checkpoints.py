"""The Redis checkpointer, fenced by the writing run's lease, with held sessions cached.

Fencing: every write goes through the lease of the graph run that makes it, found in that
run's config (``configurable[LEASE_CONFIG_KEY]``, see ``workers.lease``), never through
anything kept per process or per thread. ``aput`` and ``aput_writes`` build exactly the
documents ``AsyncRedisSaver`` builds (its own helpers; the search index and reads are
unchanged) and hand them to the lease's script, which checks the lease and writes in one
atomic step. A write without a lease, or under a lease that is no longer the run's, is
refused (``StaleLeaseError``), and nothing is written on cancellation either (the
upstream saver's cancel fallback, which wrote a document unchecked, never runs).

Caching: LangGraph's Redis saver loads and decodes the whole message history at the
start of every turn. A worker that wrote a session's latest checkpoint under fence ``f``
and now holds the lease with fence ``f + 1`` knows that nobody wrote in between (every
writer holds the lease, and fences are issued in order), so it reuses the checkpoint it
wrote instead of reading it back. For the same reason a run holding a session's first
fence (1) reads nothing until it wrote something itself: the thread is empty (a
fresh-session task skips a round trip).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.redis.aio import AsyncRedisSaver
from langgraph.checkpoint.redis.util import to_storage_safe_id, to_storage_safe_str
from ulid import ULID

from .checkpoint_serde import MessageCachingSerializer
from .errors import StaleLeaseError
from .lease import LEASE_CONFIG_KEY, CheckpointScripts, SessionLease

FIRST_FENCE = 1
"""The fence of a session's first claim (``INCR`` of a counter that lives and dies with
the session record, see ``wire.keys.Keys.fence``)."""


_FIRST_WRITES_KEPT = 65_536
"""Threads remembered as written under fence 1 (a few MB at most). An entry matters only
if a run under fence 1 reads its thread under its lease after writing to it, which
LangGraph's loop does not do (it reads once, when the run starts; the worker's own reads
carry no lease): the bound keeps the memory small, the entries keep it safe anyway."""


def lease_of(config: RunnableConfig) -> SessionLease | None:
    """The lease of the graph run a checkpointer call belongs to, if it carries one."""
    lease = config.get("configurable", {}).get(LEASE_CONFIG_KEY)
    return lease if isinstance(lease, SessionLease) else None


def _required_lease(config: RunnableConfig, thread_id: str) -> SessionLease:
    lease = lease_of(config)
    if lease is None or lease.thread_id != thread_id:
        raise StaleLeaseError(
            f"checkpoint write refused: the run writing thread {thread_id!r} holds no lease on it",
            thread_id=thread_id,
        )
    return lease


class FencedRedisSaver(AsyncRedisSaver):
    """``AsyncRedisSaver`` whose writes are fenced by the writing run's session lease.

    The lease key lives in the records' Redis, so the checkpoints must live there too
    (one atomic script sees both)."""

    def __init__(self, *args: Any, cache_size: int = 512, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # LangGraph may run a shallow clone of this saver with a clone of this serializer
        # (``with_allowlist``): both share the encodings kept, so look the serializer up
        # at each use.
        self.serde = MessageCachingSerializer(threads=cache_size)
        self._fenced = CheckpointScripts(self._redis)  # type: ignore[arg-type]
        self._cache: OrderedDict[str, tuple[int, CheckpointTuple]] = OrderedDict()
        self._cache_size = cache_size
        self._first_writes: OrderedDict[str, None] = OrderedDict()
        """Threads this process wrote to under fence 1 (the first run of their session)."""
        self._with_writes: dict[str, str] = {}
        """The checkpoint of each thread this process wrote pending writes for (an
        interrupted run writes them before its checkpoint): never cached without them."""

    # -- cache -----------------------------------------------------------------------------
    def _remember(self, thread_id: str, fence: int, stored: CheckpointTuple) -> None:
        cached = self._cache.get(thread_id)
        if cached is not None and cached[0] > fence:
            return  # a later run of this process wrote since
        self._cache[thread_id] = (fence, stored)
        self._cache.move_to_end(thread_id)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def forget(self, thread_id: str) -> None:
        self._cache.pop(thread_id, None)

    def _note_first_write(self, thread_id: str, lease: SessionLease) -> None:
        """Before the write is sent: once it may have landed, fence 1 reads it back."""
        if lease.fence == FIRST_FENCE:
            self._first_writes[thread_id] = None
            while len(self._first_writes) > _FIRST_WRITES_KEPT:
                self._first_writes.popitem(last=False)

    @staticmethod
    def _latest_top_level(config: RunnableConfig) -> str | None:
        configurable = config.get("configurable", {})
        if configurable.get("checkpoint_id") or configurable.get("checkpoint_ns", ""):
            return None
        thread_id = configurable.get("thread_id")
        return str(thread_id) if thread_id else None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = self._latest_top_level(config)
        lease = lease_of(config)
        if thread_id is None or lease is None or lease.thread_id != thread_id:
            return await super().aget_tuple(config)
        cached = self._cache.get(thread_id)
        if cached is not None and cached[0] in (lease.fence, lease.fence - 1):
            return cached[1]
        if lease.fence == FIRST_FENCE and thread_id not in self._first_writes:
            return None  # nobody holding the lease has written yet, and nobody else may
        stored = await super().aget_tuple(config)
        if stored is None:
            self.forget(thread_id)
        else:
            self._remember(thread_id, lease.fence, stored)
        return stored

    # -- fenced writes ---------------------------------------------------------------------
    def _ttl_seconds(self) -> int | None:
        if self.ttl_config and "default_ttl" in self.ttl_config:
            return int(self.ttl_config["default_ttl"] * 60)
        return None

    def _dump(self, thread_id: str, checkpoint: Checkpoint) -> dict[str, Any]:
        serde = self.serde
        if not isinstance(serde, MessageCachingSerializer):
            return self._dump_checkpoint(checkpoint.copy())
        with serde.checkpoint(str(thread_id)):
            return self._dump_checkpoint(checkpoint.copy())

    def checkpoint_document(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> tuple[str, dict[str, Any], str, RunnableConfig]:
        """``(key, document, latest pointer key, next config)`` exactly as
        ``AsyncRedisSaver.aput`` (langgraph-checkpoint-redis 0.5) computes them."""
        configurable = dict(config["configurable"])
        run_id = configurable.pop("run_id", metadata.get("run_id"))
        thread_id = configurable.pop("thread_id")
        checkpoint_ns = configurable.pop("checkpoint_ns")
        config_checkpoint_id = configurable.pop("checkpoint_id", None)
        thread_ts = configurable.pop("thread_ts", "")
        checkpoint_id = config_checkpoint_id or thread_ts or checkpoint.get("id", "")
        parent_checkpoint_id = None
        if (
            checkpoint.get("id")
            and config_checkpoint_id
            and checkpoint.get("id") != config_checkpoint_id
        ):
            parent_checkpoint_id = config_checkpoint_id
            checkpoint_id = checkpoint["id"]
        checkpoint_ts: float | None = None
        if checkpoint_id:
            try:
                checkpoint_ts = ULID.from_str(checkpoint_id).timestamp
            except Exception:
                checkpoint_ts = time.time() * 1000
        document: dict[str, Any] = {
            "thread_id": to_storage_safe_id(thread_id),
            "run_id": to_storage_safe_id(run_id) if run_id else "",
            "checkpoint_ns": to_storage_safe_str(checkpoint_ns),
            "checkpoint_id": to_storage_safe_id(checkpoint_id),
            "parent_checkpoint_id": (
                to_storage_safe_id(parent_checkpoint_id) if parent_checkpoint_id else ""
            ),
            "checkpoint_ts": checkpoint_ts,
            "checkpoint": self._dump(thread_id, checkpoint),
            "metadata": self._dump_metadata(metadata),
            "has_writes": False,
        }
        if all(key in metadata for key in ["source", "step"]):
            document["source"] = metadata["source"]
            document["step"] = metadata["step"]
        key = self._make_redis_checkpoint_key_cached(thread_id, checkpoint_ns, checkpoint_id)
        latest = self._make_redis_checkpoint_latest_key(thread_id, checkpoint_ns)
        next_config: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint_id,
            }
        }
        return key, document, latest, next_config

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        stream_mode: str = "values",
    ) -> RunnableConfig:
        thread_id = str(config.get("configurable", {}).get("thread_id", ""))
        lease = _required_lease(config, thread_id)
        key, document, latest, written = self.checkpoint_document(config, checkpoint, metadata)
        self.forget(thread_id)
        self._note_first_write(thread_id, lease)
        await lease.put_checkpoint(
            self._fenced, key, orjson.dumps(document), latest, self._ttl_seconds()
        )
        has_writes = self._with_writes.get(thread_id) == written["configurable"]["checkpoint_id"]
        if not config.get("configurable", {}).get("checkpoint_ns", "") and not has_writes:
            parent_id = config.get("configurable", {}).get("checkpoint_id")
            parent: RunnableConfig | None = None
            if parent_id:
                parent = {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": "",
                        "checkpoint_id": parent_id,
                    }
                }
            self._remember(
                thread_id, lease.fence, CheckpointTuple(written, checkpoint, metadata, parent, [])
            )
        return written

    def write_documents(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> tuple[str, str | None, list[tuple[str, dict[str, Any]]]]:
        """``(checkpoint key, write-keys registry key, [(key, document)])`` exactly as
        ``AsyncRedisSaver.aput_writes`` (langgraph-checkpoint-redis 0.5) computes them."""
        thread_id = config["configurable"]["thread_id"]
        checkpoint_ns = config["configurable"].get("checkpoint_ns", "")
        checkpoint_id = config["configurable"]["checkpoint_id"]
        documents: list[tuple[str, dict[str, Any]]] = []
        for position, (channel, value) in enumerate(writes):
            type_, blob = self.serde.dumps_typed(value)
            idx = WRITES_IDX_MAP.get(channel, position)
            document: dict[str, Any] = {
                "thread_id": to_storage_safe_id(thread_id),
                "checkpoint_ns": to_storage_safe_str(checkpoint_ns),
                "checkpoint_id": to_storage_safe_id(checkpoint_id),
                "task_id": task_id,
                "task_path": task_path,
                "idx": idx,
                "channel": channel,
                "type": type_,
                "blob": self._encode_blob(blob),
            }
            key = self._make_redis_checkpoint_writes_key_cached(
                thread_id, checkpoint_ns, checkpoint_id, task_id, idx
            )
            documents.append((key, document))
        checkpoint_key = self._make_redis_checkpoint_key(thread_id, checkpoint_ns, checkpoint_id)
        registry = None
        if self._key_registry is not None:
            registry = self._key_registry.make_write_keys_zset_key(
                thread_id, checkpoint_ns, checkpoint_id
            )
        return checkpoint_key, registry, documents

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if not writes:
            return
        thread_id = str(config.get("configurable", {}).get("thread_id", ""))
        lease = _required_lease(config, thread_id)
        checkpoint_key, registry, documents = self.write_documents(
            config, writes, task_id, task_path
        )
        # Pending writes are not tracked in the cache: read this thread back next time.
        self.forget(thread_id)
        self._note_first_write(thread_id, lease)
        self._with_writes[thread_id] = str(config["configurable"].get("checkpoint_id", ""))
        while len(self._with_writes) > self._cache_size:
            self._with_writes.pop(next(iter(self._with_writes)))
        await lease.put_writes(
            self._fenced,
            checkpoint_key,
            registry,
            [(key, orjson.dumps(document)) for key, document in documents],
            self._ttl_seconds(),
        )

    async def adelete_thread(self, thread_id: str) -> None:
        self.forget(thread_id)
        if isinstance(self.serde, MessageCachingSerializer):
            self.serde.forget(thread_id)
        self._with_writes.pop(thread_id, None)
        await super().adelete_thread(thread_id)


__all__ = ["FencedRedisSaver", "lease_of"]
