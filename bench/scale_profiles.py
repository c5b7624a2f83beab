"""The profile registry of ``bench/scale.py`` (``AHP_PROFILES=bench.scale_profiles:PROFILES``).

Workers and the API process load it from the environment: ``BENCH_SCALE_SECONDS`` (how
long a model call awaits, default 3) and ``BENCH_SCALE_CHUNKS`` (pieces it streams,
default 30). The bench's caller builds the same profile with :func:`scale_profile` from
its flags and passes those variables to every process it starts, so the profile digests
agree (a worker refuses a session whose profile digest differs from its own).
"""

from __future__ import annotations

import os

from agent_harness_protocol import ContextRetentionDisposition, UserHistoryVisibility

from wire.profiles import AgentProfile, CancellationSemantics, ModelSpec

MODEL = "bench.scale_model:ScaleChatModel"
NAME = "scale"
MODEL_ID = "ahp-bench-scale-model"
SECONDS_ENV = "BENCH_SCALE_SECONDS"
CHUNKS_ENV = "BENCH_SCALE_CHUNKS"
DEFAULT_SECONDS = 3.0
DEFAULT_CHUNKS = 30


def scale_profile(seconds: float = DEFAULT_SECONDS, chunks: int = DEFAULT_CHUNKS) -> AgentProfile:
    return AgentProfile(
        name=NAME,
        model=ModelSpec(MODEL, {"seconds": seconds, "chunks": chunks}),
        model_id=MODEL_ID,
        cancellation=CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED,
        retention=ContextRetentionDisposition.MATERIALIZED,
        history_visibility=UserHistoryVisibility.HIDDEN,
        description=f"Bench scale model: awaits {seconds:g} s while it streams {chunks} "
        "clock-stamped pieces, and records its calls in Redis.",
    )


def environment(seconds: float, chunks: int) -> dict[str, str]:
    """What a process started by the bench needs to build the caller's profile."""
    return {SECONDS_ENV: repr(float(seconds)), CHUNKS_ENV: str(chunks)}


PROFILE = scale_profile(
    float(os.environ.get(SECONDS_ENV, DEFAULT_SECONDS)),
    int(os.environ.get(CHUNKS_ENV, DEFAULT_CHUNKS)),
)
PROFILES = {PROFILE.name: PROFILE}
