"""Profile declarations: what the digest covers, what is refused at declaration, and a
provider-string model that cannot be built failing its task with the reason."""

from __future__ import annotations

import asyncio

import pytest
from agent_harness_protocol import Failed, SessionSpec, TaskRequest, TextInput

from harness import CeleryHarness
from wire.errors import ProfileError
from wire.pipelines import Pipeline, PipelineStep
from wire.profiles import (
    AgentProfile,
    ModelSource,
    ModelSpec,
    Safeguards,
    ToolApproval,
    ToolSpec,
)
from wire.settings import Settings

from .support.boundary import ModelBoundary

PLAIN = AgentProfile("plain", ModelSpec("a.b:C", {"x": 1}), model_id="m")
TOOL = ToolSpec("lookup", "a.tools:lookup", "Look something up.")


def test_a_profile_without_agent_features_keeps_the_digest_it_had_before_them() -> None:
    # The digest of this declaration before profiles had tools, safeguards or pipelines:
    # persistent sessions created then still reopen under it.
    assert PLAIN.digest == "03f7baadda7cb4169babe87414f42be2"


@pytest.mark.parametrize(
    "changed",
    [
        AgentProfile("plain", PLAIN.model, model_id="m", tools=(TOOL,)),
        AgentProfile(
            "plain",
            PLAIN.model,
            model_id="m",
            tools=(
                ToolSpec(
                    "lookup", "a.tools:lookup", "Look something up.", approval=ToolApproval.REQUIRED
                ),
            ),
        ),
        AgentProfile("plain", PLAIN.model, model_id="m", safeguards=Safeguards(max_steps=3)),
        AgentProfile(
            "plain",
            PLAIN.model,
            model_id="m",
            tools=(TOOL,),
            pipeline=Pipeline((PipelineStep("first", "Do it.", ("lookup",)),)),
        ),
        AgentProfile("plain", PLAIN.model, model_id="m", questions=True),
        AgentProfile("plain", ModelSpec("a.b:C", {"x": 1}, ModelSource.PROVIDER), model_id="m"),
    ],
)
def test_every_agent_feature_changes_the_digest(changed: AgentProfile) -> None:
    assert changed.digest != PLAIN.digest


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda: ToolSpec("lookup", "no-colon", "x"), "package.module:Attribute"),
        (lambda: ToolSpec("lookup", "a.b:c", " "), "needs a description"),
        (lambda: ToolSpec("bad name!", "a.b:c", "x"), "invalid tool id"),
        (lambda: Safeguards(max_steps=0), "max_steps must be at least 1"),
        (lambda: Safeguards(loop_window=2, loop_repeats=3), "cannot exceed loop_window"),
        (lambda: ModelSpec("gpt-4.1", source=ModelSource.PROVIDER), "provider:model"),
        (
            lambda: AgentProfile("p", PLAIN.model, tools=(TOOL, TOOL)),
            "tool names must be unique",
        ),
        (
            lambda: AgentProfile(
                "p", PLAIN.model, pipeline=Pipeline((PipelineStep("s", "x", ("nope",)),))
            ),
            "does not declare",
        ),
    ],
)
def test_malformed_declarations_are_refused_with_the_reason(declare: object, message: str) -> None:
    with pytest.raises((ProfileError, ValueError), match=message):
        declare()  # type: ignore[operator]


async def test_a_provider_model_that_cannot_be_built_fails_its_task_with_the_reason(
    settings: Settings, boundary: ModelBoundary
) -> None:
    """Profile ``unbuildable-provider`` names ``no-such-provider:some-model``: admitted
    (the caller cannot know what the workers have installed), failed by the worker."""
    async with CeleryHarness(settings, profile="unbuildable-provider") as harness:
        session = await harness.create_session(SessionSpec())
        task = await session.start_task(TaskRequest(TextInput("build me")))
        outcome = await asyncio.wait_for(task.await_outcome(), 60)
    assert isinstance(outcome, Failed)
    assert "cannot build model 'no-such-provider:some-model'" in outcome.message
    assert boundary.calls_for(task.id.value) == []
