"""The profile registry of the event and cancel latency scenarios of
``bench/latency_throughput.py`` (``AHP_PROFILES=bench.clock_profiles:PROFILES``).

Callers and workers load it alike; the workers import it because the project root is on
their ``PYTHONPATH`` (``tooling.worker_process.WorkerProcess`` puts it there, and so does
the bench's own ``WorkerPool``).
"""

from agent_harness_protocol import ContextRetentionDisposition, UserHistoryVisibility

from wire.profiles import AgentProfile, CancellationSemantics, ModelSpec

MODEL = "bench.clock_model:ClockChatModel"

EVENT_CHUNKS = 20
EVENT_INTERVAL = 0.005
SLOW_CHUNKS = 1000
SLOW_INTERVAL = 0.010

CLOCK = AgentProfile(
    name="clock",
    model=ModelSpec(MODEL, {"chunks": EVENT_CHUNKS, "interval": EVENT_INTERVAL}),
    model_id="ahp-bench-clock-model",
    cancellation=CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED,
    retention=ContextRetentionDisposition.MATERIALIZED,
    history_visibility=UserHistoryVisibility.HIDDEN,
    description=f"Bench clock model: {EVENT_CHUNKS} pieces {EVENT_INTERVAL * 1000:g} ms apart, "
    "each stamped with the worker's wall clock.",
)

CLOCK_SLOW = AgentProfile(
    name="clock-slow",
    model=ModelSpec(MODEL, {"chunks": SLOW_CHUNKS, "interval": SLOW_INTERVAL}),
    model_id="ahp-bench-clock-model",
    cancellation=CLOCK.cancellation,
    retention=CLOCK.retention,
    history_visibility=CLOCK.history_visibility,
    description=f"Bench clock model, slow: a piece every {SLOW_INTERVAL * 1000:g} ms for "
    f"{SLOW_CHUNKS * SLOW_INTERVAL:g} s (a run to cancel).",
)

PROFILES = {CLOCK.name: CLOCK, CLOCK_SLOW.name: CLOCK_SLOW}
