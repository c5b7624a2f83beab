"""Where a lost run's successor resumes a turn: a step whose writes were kept but whose
checkpoint was not is not a finished turn.

An agent with tools checkpoints every step; within a step LangGraph keeps each node's
writes as it ends (``aput_writes``) and writes the step's checkpoint after (``aput``). A run
lost between the two (its worker stalled or killed, Redis restarting) leaves a checkpoint
whose only next node already has its writes: LangGraph's ``StateSnapshot.next`` then reads
empty. The soak found successors that took that for a finished turn and settled the task
``Completed`` with no output and no model call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.redis.aio import AsyncRedisSaver
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from wire.profiles import AgentProfile, ModelSpec, ToolSpec
from workers.graph import AgentGraph, ResumeKind
from workers.model_calls import ModelCalls
from workers.models import build_model
from workers.tools import build_tools

PLAN = json.dumps([{"tool": "word_count", "args": {}}])
PROFILE = AgentProfile(
    name="resume-point",
    model=ModelSpec("workers.scripted_model:ScriptedChatModel", {"plan": PLAN}),
    tools=(ToolSpec("word_count", "workers.demo_tools:word_count", "Count the words."),),
)


@dataclass
class _Loss:
    armed: bool = False
    lost: bool = False


class _LosesTheStepCheckpoint(AsyncRedisSaver):
    """Keeps every node's writes, and fails the first step checkpoint after the first
    writes were kept: the run is lost between the two, as a stalled worker's would be.

    The state lives in one ``_Loss`` the saver's copies share: with strict msgpack
    (``LANGGRAPH_STRICT_MSGPACK=true``, as the workers run) LangGraph compiles the graph
    on a shallow copy of its checkpointer (``with_allowlist``), and that copy is the one
    the run calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loss = _Loss()

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, **kw: Any
    ) -> None:
        await super().aput_writes(config, writes, task_id, **kw)
        if not self.loss.lost:
            self.loss.armed = True

    async def aput(self, config: RunnableConfig, *args: Any, **kwargs: Any) -> RunnableConfig:
        if self.loss.armed and not self.loss.lost:
            self.loss.lost = True
            raise RedisConnectionError("the run was lost before its step's checkpoint")
        return await super().aput(config, *args, **kwargs)


async def test_a_step_whose_writes_were_kept_but_not_its_checkpoint_is_continued(
    redis_url: str,
) -> None:
    client = Redis.from_url(redis_url)
    try:
        async with _LosesTheStepCheckpoint(redis_client=client) as saver:
            graph = AgentGraph(
                build_model(PROFILE.model), build_tools(PROFILE.tools), PROFILE, saver, ModelCalls()
            )
            thread_id, task_id = f"resume-point-{uuid4().hex}", uuid4().hex
            with pytest.raises(RedisConnectionError):
                async for _ in graph.stream_turn(
                    thread_id, "count these words", None, {"ahp_task_id": task_id}
                ):
                    pass
            assert saver.loss.lost
            point = await graph.resume_point(thread_id, task_id)
            assert point.kind is ResumeKind.CONTINUE, point
            # Run on from there: the turn ends with the model's answer after the tool.
            async for _ in graph.stream_turn(thread_id, None, None, {"ahp_task_id": task_id}):
                pass
            finished = await graph.resume_point(thread_id, task_id)
            assert finished.kind is ResumeKind.FINISHED, finished
            assert finished.turn[-1].text.startswith("[scripted model]"), finished.turn
    finally:
        await client.aclose()
