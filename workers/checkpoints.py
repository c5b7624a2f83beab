"""The Redis checkpointer, fenced: a run that lost its session lease cannot write."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
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

    async def require(self, config: RunnableConfig) -> None:
        thread_id = str(config.get("configurable", {}).get("thread_id", ""))
        lease = self._held.get(thread_id)
        if lease is None or not await self._store.holds(lease.session_id, lease.value):
            raise StaleLeaseError(f"checkpoint write refused: thread {thread_id!r} lease not held")


class FencedRedisSaver(AsyncRedisSaver):
    """``AsyncRedisSaver`` that checks the writer's lease before every write."""

    def __init__(self, *args: Any, leases: LeaseRegistry, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._leases = leases

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        stream_mode: str = "values",
    ) -> RunnableConfig:
        await self._leases.require(config)
        return await super().aput(config, checkpoint, metadata, new_versions, stream_mode)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._leases.require(config)
        await super().aput_writes(config, writes, task_id, task_path)
