"""The profile registry of the soak run (``AHP_PROFILES=bench.soak_profiles:PROFILES``).

Callers and workers load it alike; the workers import it because the project root is on
their ``PYTHONPATH`` (``tooling.worker_process.WorkerProcess`` puts it there).

``soak`` answers; ``soak-tool`` and ``soak-tool-once`` first call a tool with a real
effect (``bench.soak_tools``), at least once and at most once, then answer the same way.
"""

from dataclasses import replace

from agent_harness_protocol import ContextRetentionDisposition, UserHistoryVisibility

from wire.profiles import AgentProfile, CancellationSemantics, ModelSpec, ToolDelivery, ToolSpec

_MODEL_OPTIONS = {"min_seconds": 0.2, "max_seconds": 1.5}

SOAK = AgentProfile(
    name="soak",
    model=ModelSpec("bench.soak_model:SoakChatModel", _MODEL_OPTIONS),
    model_id="ahp-soak-model",
    cancellation=CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED,
    retention=ContextRetentionDisposition.MATERIALIZED,
    history_visibility=UserHistoryVisibility.HIDDEN,
    description="Soak model: streams over 0.2-1.5 s and records its calls in Redis.",
)


def fixed_length(name: str, seconds: float, model_id: str, description: str) -> AgentProfile:
    """The soak's self-recording model with every call streaming for exactly ``seconds``
    (the registries of ``bench/recovery.py`` and ``bench/fairness.py``)."""
    options = {"min_seconds": seconds, "max_seconds": seconds}
    return replace(
        SOAK,
        name=name,
        model=ModelSpec("bench.soak_model:SoakChatModel", options),
        model_id=model_id,
        description=description,
    )


SOAK_EFFECT = ToolSpec(
    "soak_effect",
    "bench.soak_tools:soak_effect",
    "Perform the soak's effect for a label.",
    effect="appends a record to the soak's effect log (deduplicated by the call's key)",
)
SOAK_EFFECT_ONCE = ToolSpec(
    "soak_effect_once",
    "bench.soak_tools:soak_effect_once",
    "Perform the soak's effect for a label, never twice.",
    effect="appends a record to the soak's effect log",
    delivery=ToolDelivery.AT_MOST_ONCE,
)


def _with_tool(name: str, tool: ToolSpec) -> AgentProfile:
    return AgentProfile(
        name=name,
        model=ModelSpec("bench.soak_model:SoakChatModel", {**_MODEL_OPTIONS, "tool": tool.name}),
        model_id="ahp-soak-model",
        cancellation=SOAK.cancellation,
        retention=SOAK.retention,
        history_visibility=SOAK.history_visibility,
        tools=(tool,),
        description=f"Soak model calling {tool.name} ({tool.delivery.value}), then answering.",
    )


SOAK_TOOL = _with_tool("soak-tool", SOAK_EFFECT)
SOAK_TOOL_ONCE = _with_tool("soak-tool-once", SOAK_EFFECT_ONCE)

PROFILES = {profile.name: profile for profile in (SOAK, SOAK_TOOL, SOAK_TOOL_ONCE)}
