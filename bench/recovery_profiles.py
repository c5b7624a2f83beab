"""The profile registry of ``bench/recovery.py``
(``AHP_PROFILES=bench.recovery_profiles:PROFILES``).

Callers and workers load it alike (the workers import it because the project root is on
their ``PYTHONPATH``). ``recovery`` is the soak's self-recording model
(``bench.soak_model``: each call's start, pid and process group on record in Redis before
it streams) with a fixed call length, long enough that a signal sent once a call is on
record lands mid-call.
"""

from agent_harness_protocol import ContextRetentionDisposition, UserHistoryVisibility

from wire.profiles import AgentProfile, CancellationSemantics, ModelSpec

MODEL_SECONDS = 2.0
"""How long every model call streams its answer."""

RECOVERY = AgentProfile(
    name="recovery",
    model=ModelSpec(
        "bench.soak_model:SoakChatModel",
        {"min_seconds": MODEL_SECONDS, "max_seconds": MODEL_SECONDS},
    ),
    model_id="ahp-recovery-model",
    cancellation=CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED,
    retention=ContextRetentionDisposition.MATERIALIZED,
    history_visibility=UserHistoryVisibility.HIDDEN,
    description=f"Recovery model: streams for {MODEL_SECONDS:g} s and records its calls in Redis.",
)

PROFILES = {RECOVERY.name: RECOVERY}
