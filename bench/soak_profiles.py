"""The profile registry of the soak run (``AHP_PROFILES=bench.soak_profiles:PROFILES``).

Callers and workers load it alike; the workers import it because the project root is on
their ``PYTHONPATH`` (``tooling.worker_process.WorkerProcess`` puts it there).
"""

from agent_harness_protocol import ContextRetentionDisposition, UserHistoryVisibility

from wire.profiles import AgentProfile, CancellationSemantics, ModelSpec

SOAK = AgentProfile(
    name="soak",
    model=ModelSpec("bench.soak_model:SoakChatModel", {"min_seconds": 0.2, "max_seconds": 1.5}),
    model_id="ahp-soak-model",
    cancellation=CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED,
    retention=ContextRetentionDisposition.MATERIALIZED,
    history_visibility=UserHistoryVisibility.HIDDEN,
    description="Soak model: streams over 0.2-1.5 s and records its calls in Redis.",
)

PROFILES = {SOAK.name: SOAK}
