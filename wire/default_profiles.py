"""The profiles a fresh deployment knows without configuration.

``scripted`` runs a deterministic, clearly labelled scripted model (no provider, no
network): it answers by quoting what it was asked and what the conversation held, so a
demo shows that the second task of a session saw the first. Real deployments point
``AHP_PROFILES`` at their own registry.
"""

from agent_harness_protocol import ContextRetentionDisposition, UserHistoryVisibility

from .profiles import AgentProfile, CancellationSemantics, ModelSpec

SCRIPTED = AgentProfile(
    name="scripted",
    model=ModelSpec("workers.scripted_model:ScriptedChatModel"),
    model_id="scripted-demo-model",
    cancellation=CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED,
    retention=ContextRetentionDisposition.MATERIALIZED,
    history_visibility=UserHistoryVisibility.HIDDEN,
    description="Scripted in-process model for demos: no provider, deterministic replies.",
)

PROFILES = {SCRIPTED.name: SCRIPTED}
