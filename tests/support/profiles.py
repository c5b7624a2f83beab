"""The profile registry both the test harnesses and the test workers load."""

import json

from agent_harness_protocol import ContextRetentionDisposition as Retention
from agent_harness_protocol import UserHistoryVisibility as Visibility

from wire.pipelines import Pipeline, PipelineStep
from wire.profiles import (
    AgentProfile,
    CancellationSemantics,
    ModelSource,
    ModelSpec,
    Safeguards,
    ToolApproval,
    ToolDelivery,
    ToolSpec,
)

MODEL_ID = "ahp-controlled-model"
CONTROLLED = "tests.support.controlled_model:ControlledChatModel"
CONFIRMED = CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED
UNCONFIRMED = CancellationSemantics.UNCONFIRMED


RECORD_EFFECT = ToolSpec(
    "record_effect",
    "tests.support.tools:record_effect",
    "Record an effect under a label.",
    effect="appends a record to the test's effect log",
)
FAILING_TOOL = ToolSpec(
    "failing_tool",
    "tests.support.tools:failing_tool",
    "A tool that always fails.",
    effect="appends a record to the test's effect log, then fails",
)
GUARDED_EFFECT = ToolSpec(
    "guarded_effect",
    "tests.support.tools:guarded_effect",
    "Record an effect that needs the caller's approval.",
    effect="appends a record to the test's effect log",
    approval=ToolApproval.REQUIRED,
)
TOOLS = (RECORD_EFFECT, FAILING_TOOL, GUARDED_EFFECT)
GRANTABLE_EFFECT = ToolSpec(
    "guarded_effect",
    "tests.support.tools:guarded_effect",
    "Record an effect that needs the caller's approval.",
    effect="appends a record to the test's effect log",
    approval=ToolApproval.REQUIRED,
    session_grant="guarded_effect with any label, for the rest of this session",
)

GUARDED_PLAN = json.dumps(
    [
        {"tool_call": {"name": "guarded_effect", "args": {"label": "guarded"}}},
        {"reply": "guarded-result"},
    ]
)
"""Each task: one call of the approval-gated tool, then an answer."""

FRAGILE_EFFECT = ToolSpec(
    "fragile_effect",
    "tests.support.tools:fragile_effect",
    "Record an effect that needs the caller's approval (its first run kills its worker).",
    effect="appends a record to the test's effect log",
    approval=ToolApproval.REQUIRED,
)
FRAGILE_PLAN = json.dumps(
    [
        {"tool_call": {"name": "fragile_effect", "args": {"label": "fragile"}}},
        {"reply": "fragile-result"},
    ]
)
"""Each task: one call of the approval-gated tool that kills its first worker."""

DYING_EFFECT = ToolSpec(
    "dying_effect",
    "tests.support.tools:dying_effect",
    "Record an effect that needs the caller's approval (its first attempt dies mid-effect).",
    effect="appends a record to the test's effect log",
    approval=ToolApproval.REQUIRED,
)
"""At least once (the default): it deduplicates its effect by the call's idempotency key."""
DYING_EFFECT_AT_MOST_ONCE = ToolSpec(
    "dying_effect",
    "tests.support.tools:dying_effect",
    "Record an effect that needs the caller's approval (its first attempt dies mid-effect).",
    effect="appends a record to the test's effect log",
    approval=ToolApproval.REQUIRED,
    delivery=ToolDelivery.AT_MOST_ONCE,
)
DYING_PLAN = json.dumps(
    [
        {"tool_call": {"name": "dying_effect", "args": {"label": "dying"}}},
        {"reply": "dying-result"},
    ]
)
"""Each task: one call of the approval-gated tool whose first attempt kills its worker
after its effect began, then an answer."""

GUARDED_TWICE_PLAN = json.dumps(
    [
        {
            "tool_call": {
                "name": "guarded_effect",
                "args": {"label": "first"},
                "more": [{"name": "guarded_effect", "args": {"label": "second"}}],
            }
        },
        {"reply": "both-decided"},
    ]
)
"""Each task: two calls of the approval-gated tool in one message, then an answer."""

QUESTION_PLAN = json.dumps(
    [
        {
            "tool_call": {
                "name": "ask_caller",
                "args": {"question": "Which colour?", "choices": ["red", "blue"]},
            }
        },
        {"reply": "noted"},
    ]
)
"""Each task: one question to the caller (``ask_caller``), then an answer."""
RECORD_CATEGORY = ToolSpec(
    "record_category",
    "tests.support.tools:record_category",
    "Record that an item was categorized.",
    effect="appends a record to the test's effect log",
)
PIPELINE = Pipeline(
    steps=(
        PipelineStep(
            "collect",
            "STEP-COLLECT: record each item with record_effect.",
            tools=("record_effect",),
            validator="tests.support.steering:requires_recorded_effect",
        ),
        PipelineStep(
            "categorize",
            "STEP-CATEGORIZE: categorize each item with record_category.",
            tools=("record_category",),
        ),
    ),
    max_nudges=2,
)
ASYNC_VALIDATED = Pipeline(
    steps=(
        PipelineStep(
            "collect",
            "STEP-COLLECT: record two items with record_effect.",
            tools=("record_effect",),
            validator="tests.support.steering:at_least_two_items",
        ),
    ),
    max_nudges=0,
)

SEQUENCE_PLAN = json.dumps(
    [
        {
            "tool_call": {"name": "record_effect", "args": {"label": "first"}},
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        },
        # This call's provider measured its input only: output and total stay unknown.
        {
            "tool_call": {"name": "record_effect", "args": {"label": "second"}},
            "usage": {"input_tokens": 7},
        },
        # A measured zero keeps the unknown fields unknown.
        {
            "reply": "sequence-result",
            "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        },
    ]
)


def _profile(
    name: str,
    *,
    cancellation: CancellationSemantics = CONFIRMED,
    retention: Retention = Retention.UNKNOWN,
    visibility: Visibility = Visibility.UNKNOWN,
    tools: tuple[ToolSpec, ...] = (),
    safeguards: Safeguards | None = None,
    questions: bool = False,
    pipeline: Pipeline | None = None,
    queue: str | None = None,
    **options: str | int | bool | None,
) -> AgentProfile:
    return AgentProfile(
        name=name,
        model=ModelSpec(CONTROLLED, options),
        model_id=MODEL_ID,
        cancellation=cancellation,
        retention=retention,
        history_visibility=visibility,
        tools=tools,
        safeguards=safeguards or Safeguards(),
        questions=questions,
        pipeline=pipeline,
        queue=queue,
    )


SECOND_QUEUE = "q2"
"""The queue of the ``*-q2`` profiles: no in-process worker serves it, only worker
processes started with ``queues=(SECOND_QUEUE,)`` (tests/test_profile_queues.py)."""

_ALL = [
    _profile("confirmed"),
    _profile("unconfirmed", cancellation=UNCONFIRMED),
    _profile("ignoring", ignore_cancellation=True),
    _profile("load", load_chunks=400, reply="load-complete"),
    # Streams for ~2 s, then holds (while the boundary holds) before its reply.
    _profile(
        "streaming",
        load_chunks=40,
        chunk_delay_ms=50,
        hold_before_reply=True,
        reply="stream-complete",
    ),
    _profile("lifecycle", cancellation=UNCONFIRMED, scripted=True, ignore_cancellation=True),
    # Each task's model calls follow that task's own script (``ModelBoundary.script``).
    _profile("scripted", scripted=True),
    # A two-step pipeline (collect, then categorize), scripted per task; failing_tool is
    # named by no step, so it is visible in every step.
    _profile(
        "pipeline",
        tools=(RECORD_EFFECT, RECORD_CATEGORY, FAILING_TOOL),
        pipeline=PIPELINE,
        scripted=True,
    ),
    # One step whose completion an async validator checks.
    _profile(
        "pipeline-async",
        tools=(RECORD_EFFECT,),
        pipeline=ASYNC_VALIDATED,
        scripted=True,
    ),
    _profile("metered", input_tokens=7, output_tokens=3),
    # Each run's answer names its worker process: a stale run's answer is recognisable.
    _profile("tagged", reply_tagged=True),
    _profile("accounting", input_tokens=7, output_tokens=3, reply="measured-result"),
    # Scripted per boundary scope (the outcome suite controls the model without task ids).
    _profile("outcome", scripted=True, script_by_scope=True),
    # Each task calls the approval-gated tool once (the caller decides), then answers;
    # with "granted" the tool may be approved for the rest of the session.
    _profile("guarding", tools=(GUARDED_EFFECT,), plan=GUARDED_PLAN),
    _profile("guarding-granted", tools=(GRANTABLE_EFFECT,), plan=GUARDED_PLAN),
    _profile("guarding-twice", tools=(GUARDED_EFFECT,), plan=GUARDED_TWICE_PLAN),
    _profile("guarding-fragile", tools=(FRAGILE_EFFECT,), plan=FRAGILE_PLAN),
    _profile("guarding-dying", tools=(DYING_EFFECT,), plan=DYING_PLAN),
    _profile("guarding-dying-once", tools=(DYING_EFFECT_AT_MOST_ONCE,), plan=DYING_PLAN),
    _profile("questioning", questions=True, plan=QUESTION_PLAN),
    # The same agents on a queue of their own.
    _profile("confirmed-q2", queue=SECOND_QUEUE),
    _profile("guarding-q2", tools=(GUARDED_EFFECT,), plan=GUARDED_PLAN, queue=SECOND_QUEUE),
    # A model that streams for about a second unless cancelled.
    _profile("slow", load_chunks=20, chunk_delay_ms=50),
    # A call streams for 0.1 s: a burst of them keeps the pool's slots busy.
    _profile("brisk", load_chunks=4, chunk_delay_ms=25),
    _profile("slow-unconfirmed", cancellation=UNCONFIRMED, load_chunks=20, chunk_delay_ms=50),
    _profile("undeclared"),
    _profile("ephemeral-hidden", retention=Retention.EPHEMERAL, visibility=Visibility.HIDDEN),
    _profile(
        "materialized-visible", retention=Retention.MATERIALIZED, visibility=Visibility.VISIBLE
    ),
    _profile("ephemeral-undeclared", retention=Retention.EPHEMERAL),
    # Agents with tools, scripted per task (tool calls included).
    _profile("agent", tools=TOOLS, scripted=True, input_tokens=7, output_tokens=3),
    _profile(
        "agent-unconfirmed",
        cancellation=UNCONFIRMED,
        tools=TOOLS,
        scripted=True,
        input_tokens=7,
        output_tokens=3,
    ),
    # Each task: two tool calls (measured, then partly measured), then a measured zero.
    _profile("sequence", tools=TOOLS, plan=SEQUENCE_PLAN),
    _profile(
        "step-limited",
        tools=TOOLS,
        safeguards=Safeguards(max_steps=2),
        scripted=True,
        input_tokens=7,
        output_tokens=3,
    ),
    _profile(
        "loop-guarded",
        tools=TOOLS,
        safeguards=Safeguards(loop_window=4, loop_repeats=2),
        scripted=True,
        input_tokens=7,
        output_tokens=3,
    ),
    # 10 tokens per call: the third call takes a task to 30, over its budget of 25.
    _profile(
        "budgeted",
        tools=TOOLS,
        safeguards=Safeguards(token_budget=25),
        scripted=True,
        input_tokens=7,
        output_tokens=3,
    ),
]

# A provider string whose LangChain package no worker has: its tasks fail with the reason.
_ALL.append(
    AgentProfile(
        "unbuildable-provider",
        ModelSpec("no-such-provider:some-model", source=ModelSource.PROVIDER),
    )
)

# Remote-model shaped runs for the scale tests (tests/test_scale.py): each awaits while it
# streams 20 stamped chunks, and counts its calls where it runs.
PACED = "tests.support.paced_model:PacedChatModel"
BLOCK_THREAD = ToolSpec(
    "block_thread",
    "tests.support.paced_model:block_thread",
    "Block the calling thread for some seconds.",
    effect="none (it only blocks its thread)",
)
_PACED_OPTIONS: dict[str, str | int | float | bool | None] = {"chunks": 20, "seconds": 2.0}
_ALL += [
    AgentProfile(
        "paced", ModelSpec(PACED, _PACED_OPTIONS), model_id=MODEL_ID, cancellation=CONFIRMED
    ),
    AgentProfile(
        "paced-long",
        ModelSpec(PACED, {"chunks": 30, "seconds": 12.0}),
        model_id=MODEL_ID,
        cancellation=CONFIRMED,
    ),
    AgentProfile(
        "paced-effect",
        ModelSpec(PACED, {"chunks": 30, "seconds": 8.0, "effect_first": True}),
        model_id=MODEL_ID,
        cancellation=CONFIRMED,
        tools=(RECORD_EFFECT,),
    ),
    AgentProfile(
        "paced-blocking",
        ModelSpec(PACED, {**_PACED_OPTIONS, "blocking_first": True, "block_seconds": 5.0}),
        model_id=MODEL_ID,
        cancellation=CONFIRMED,
        tools=(BLOCK_THREAD,),
    ),
]

PROFILES = {profile.name: profile for profile in _ALL}
