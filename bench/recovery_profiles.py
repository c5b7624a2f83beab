"""The profile registry of ``bench/recovery.py``
(``AHP_PROFILES=bench.recovery_profiles:PROFILES``).

Callers and workers load it alike (the workers import it because the project root is on
their ``PYTHONPATH``). ``recovery`` is the soak's self-recording model
(``bench.soak_model``: each call's start, pid and process group on record in Redis before
it streams) with a fixed call length, long enough that a signal sent once a call is on
record lands mid-call.
"""

from bench.soak_profiles import fixed_length

MODEL_SECONDS = 2.0
"""How long every model call streams its answer."""

RECOVERY = fixed_length(
    "recovery",
    MODEL_SECONDS,
    "ahp-recovery-model",
    f"Recovery model: streams for {MODEL_SECONDS:g} s and records its calls in Redis.",
)

PROFILES = {RECOVERY.name: RECOVERY}
