"""The profile registry of ``bench/fairness.py``
(``AHP_PROFILES=bench.fairness_profiles:PROFILES``).

``fair`` is the soak's self-recording model (``bench.soak_model``) with a fixed call
length: every run streams its answer for ``MODEL_SECONDS``, as a remote model would
(awaiting, no CPU), so a burst keeps the pool's slots busy for a known time.
"""

from agent_harness_protocol import ContextRetentionDisposition, UserHistoryVisibility

from wire.profiles import AgentProfile, CancellationSemantics, ModelSpec

MODEL_SECONDS = 0.2
"""How long every model call streams its answer."""

FAIR = AgentProfile(
    name="fair",
    model=ModelSpec(
        "bench.soak_model:SoakChatModel",
        {"min_seconds": MODEL_SECONDS, "max_seconds": MODEL_SECONDS},
    ),
    model_id="ahp-fairness-model",
    cancellation=CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED,
    retention=ContextRetentionDisposition.MATERIALIZED,
    history_visibility=UserHistoryVisibility.HIDDEN,
    description=f"Fairness model: streams for {MODEL_SECONDS:g} s.",
)

PROFILES = {FAIR.name: FAIR}
