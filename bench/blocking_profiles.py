"""The profile registry of ``bench/blocking_tool.py``
(``AHP_PROFILES=bench.blocking_profiles:PROFILES``).

Both use the soak's self-recording model (``bench.soak_model``), every answer streamed in
8 pieces over 2 s (0.25 s apart). ``blocking`` first calls ``block_thread``, a synchronous
tool that blocks its thread for 5 s (blocking I/O, as a careless tool does), then
answers; ``streaming`` answers at once.
"""

from __future__ import annotations

import time

from agent_harness_protocol import ContextRetentionDisposition, UserHistoryVisibility

from wire.profiles import AgentProfile, CancellationSemantics, ModelSpec, ToolSpec

MODEL_SECONDS = 2.0
"""How long every answer streams."""
BLOCK_SECONDS = 5.0
"""How long ``block_thread`` blocks its thread."""


def block_thread(label: str) -> str:
    """Block this thread for ``BLOCK_SECONDS`` (the model names its question ``label``)."""
    time.sleep(BLOCK_SECONDS)
    return f"blocked {BLOCK_SECONDS:g} s for {label}"


BLOCK_THREAD = ToolSpec(
    "block_thread",
    "bench.blocking_profiles:block_thread",
    "Block the calling thread for some seconds.",
    effect="none (it only blocks its thread)",
)


def _profile(name: str, tool: ToolSpec | None) -> AgentProfile:
    options: dict[str, str | float] = {"min_seconds": MODEL_SECONDS, "max_seconds": MODEL_SECONDS}
    if tool is not None:
        options["tool"] = tool.name
    return AgentProfile(
        name=name,
        model=ModelSpec("bench.soak_model:SoakChatModel", options),
        model_id="ahp-blocking-model",
        cancellation=CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED,
        retention=ContextRetentionDisposition.MATERIALIZED,
        history_visibility=UserHistoryVisibility.HIDDEN,
        tools=() if tool is None else (tool,),
        description=f"Streams for {MODEL_SECONDS:g} s"
        + ("" if tool is None else f" after calling {tool.name}")
        + ".",
    )


PROFILES = {
    profile.name: profile
    for profile in (_profile("blocking", BLOCK_THREAD), _profile("streaming", None))
}
