"""The Redis checkpointer, fenced, with the latest checkpoint of held sessions cached.

Fencing: a run that lost its session lease cannot write. Caching: LangGraph's Redis saver
loads and decodes the whole message history at the start of every turn. A worker that
wrote a session's latest checkpoint under fence ``f`` and now holds the lease with fence
``f + 1`` knows that nobody wrote in between (every writer holds the lease, and fences
are issued in order), so it reuses the checkpoint it wrote instead of reading it back.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.redis.aio import AsyncRedisSaver

from wire.store import RecordStore

from .errors import StaleLeaseError


@dataclass(frozen=True, slots=True)
class HeldLease:
    session_id: str
    value: str


class LeaseRegistry:
    """The lease each live run of this process holds, by checkpoint thread id."""

    def __init__(self, store: RecordStore) -> None:
        self._store = store
        self._held: dict[str, HeldLease] = {}

    def register(self, thread_id: str, lease: HeldLease) -> None:
        self._held[thread_id] = lease

    def unregister(self, thread_id: str, lease: HeldLease) -> None:
        if self._held.get(thread_id) == lease:
            del self._held[thread_id]

    def fence_of(self, thread_id: str) -> int | None:
        """The fence of the lease this process holds for ``thread_id``, if any."""
        lease = self._held.get(thread_id)
        if lease is None:
            return None
        return int(lease.value.split(":", 1)[0])

    async def require(self, config: RunnableConfig) -> None:
        thread_id = str(config.get("configurable", {}).get("thread_id", ""))
        lease = self._held.get(thread_id)
        if lease is None or not await self._store.holds(lease.session_id, lease.value):
            raise StaleLeaseError(f"checkpoint write refused: thread {thread_id!r} lease not held")


class FencedRedisSaver(AsyncRedisSaver):
    """``AsyncRedisSaver`` that checks the writer's lease before every write."""

    def __init__(
        self, *args: Any, leases: LeaseRegistry, cache_size: int = 512, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._leases = leases
        self._cache: OrderedDict[str, tuple[int, CheckpointTuple]] = OrderedDict()
        self._cache_size = cache_size

    def _remember(self, thread_id: str, fence: int, stored: CheckpointTuple) -> None:
        self._cache[thread_id] = (fence, stored)
        self._cache.move_to_end(thread_id)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def forget(self, thread_id: str) -> None:
        self._cache.pop(thread_id, None)

    @staticmethod
    def _latest_top_level(config: RunnableConfig) -> str | None:
        configurable = config.get("configurable", {})
        if configurable.get("checkpoint_id") or configurable.get("checkpoint_ns", ""):
            return None
        thread_id = configurable.get("thread_id")
        return str(thread_id) if thread_id else None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = self._latest_top_level(config)
        fence = None if thread_id is None else self._leases.fence_of(thread_id)
        if thread_id is None or fence is None:
            return await super().aget_tuple(config)
        cached = self._cache.get(thread_id)
        if cached is not None and cached[0] in (fence, fence - 1):
            return cached[1]
        stored = await super().aget_tuple(config)
        if stored is None:
            self.forget(thread_id)
        else:
            self._remember(thread_id, fence, stored)
        return stored

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        stream_mode: str = "values",
    ) -> RunnableConfig:
        await self._leases.require(config)
        thread_id = str(config.get("configurable", {}).get("thread_id", ""))
        self.forget(thread_id)
        written = await super().aput(config, checkpoint, metadata, new_versions, stream_mode)
        fence = self._leases.fence_of(thread_id)
        if fence is not None and not config.get("configurable", {}).get("checkpoint_ns", ""):
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
                thread_id, fence, CheckpointTuple(written, checkpoint, metadata, parent, [])
            )
        return written

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._leases.require(config)
        # Pending writes are not tracked in the cache: read this thread back next time.
        self.forget(str(config.get("configurable", {}).get("thread_id", "")))
        await super().aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.forget(thread_id)
        await super().adelete_thread(thread_id)
