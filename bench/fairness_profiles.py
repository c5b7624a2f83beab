"""The profile registry of ``bench/fairness.py``
(``AHP_PROFILES=bench.fairness_profiles:PROFILES``).

``fair`` is the soak's self-recording model (``bench.soak_model``) with a fixed call
length: every run streams its answer for ``MODEL_SECONDS``, as a remote model would
(awaiting, no CPU), so a burst keeps the pool's slots busy for a known time.
"""

from bench.soak_profiles import fixed_length

MODEL_SECONDS = 0.2
"""How long every model call streams its answer."""

FAIR = fixed_length(
    "fair", MODEL_SECONDS, "ahp-fairness-model", f"Fairness model: streams for {MODEL_SECONDS:g} s."
)

PROFILES = {FAIR.name: FAIR}
