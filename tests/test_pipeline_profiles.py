"""Pipeline declarations (``wire.pipelines``) as profiles carry them: checked when the
profile is built, and covered by its digest."""

from __future__ import annotations

import pytest

from wire.errors import ProfileError
from wire.pipelines import STATUS_TOOL, Pipeline, PipelineStep
from wire.profiles import AgentProfile, ModelSpec, ToolSpec

MODEL = ModelSpec("tests.support.controlled_model:ControlledChatModel")
TOOLS = tuple(
    ToolSpec(name, f"tests.support.tools:{name}", f"The {name} tool.")
    for name in ("add_items", "flag", "lookup")
)


def _pipeline(**overrides: object) -> Pipeline:
    values: dict[str, object] = {
        "steps": (
            PipelineStep("collect", "Collect the items.", tools=("add_items",)),
            PipelineStep(
                "review",
                "Review the items.",
                tools=("flag",),
                required=False,
                validator="tests.support.steering:at_least_two_items",
            ),
        ),
        "global_tools": ("lookup",),
        "max_nudges": 2,
    }
    values.update(overrides)
    return Pipeline(**values)  # type: ignore[arg-type]


def test_a_pipeline_keeps_its_steps_in_order_and_names_its_tools() -> None:
    pipeline = _pipeline()
    assert [step.name for step in pipeline.steps] == ["collect", "review"]
    assert pipeline.required_steps == ("collect",)
    assert pipeline.scoped_tools() == {"add_items", "flag", "lookup"}
    assert pipeline.unknown_tools(["add_items", "lookup"]) == ("flag",)
    step = pipeline.step("review")
    assert step is not None
    assert step.validator == "tests.support.steering:at_least_two_items"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"steps": ()}, "at least one step"),
        (
            {"steps": (PipelineStep("a", "x"), PipelineStep("a", "y"))},
            "unique",
        ),
        ({"max_nudges": -1}, "max_nudges"),
        ({"global_tools": (STATUS_TOOL,)}, "status tool"),
    ],
)
def test_an_unusable_pipeline_is_refused(change: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        _pipeline(**change)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"name": "has space", "instruction": "x"}, "step name"),
        ({"name": "", "instruction": "x"}, "step name"),
        ({"name": "a", "instruction": "  "}, "instruction"),
        ({"name": "a", "instruction": "x", "tools": ("t", "t")}, "twice"),
        ({"name": "a", "instruction": "x", "validator": "no_colon"}, "package.module"),
    ],
)
def test_an_unusable_step_is_refused(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        PipelineStep(**arguments)  # type: ignore[arg-type]


def test_a_profile_refuses_a_pipeline_naming_tools_it_does_not_declare() -> None:
    with pytest.raises(ProfileError, match="does not declare: flag, lookup"):
        AgentProfile("p", MODEL, tools=TOOLS[:1], pipeline=_pipeline())


def test_the_profile_digest_covers_the_pipeline() -> None:
    plain = AgentProfile("p", MODEL, tools=TOOLS)
    piped = AgentProfile("p", MODEL, tools=TOOLS, pipeline=_pipeline())
    reordered = AgentProfile(
        "p", MODEL, tools=TOOLS, pipeline=_pipeline(steps=tuple(reversed(_pipeline().steps)))
    )
    fewer_nudges = AgentProfile("p", MODEL, tools=TOOLS, pipeline=_pipeline(max_nudges=1))
    digests = {p.digest for p in (plain, piped, reordered, fewer_nudges)}
    assert len(digests) == 4
    assert piped.to_json()["pipeline"] == _pipeline().to_json()
    assert "pipeline" not in plain.to_json()
