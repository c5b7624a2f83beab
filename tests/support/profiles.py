"""The profile registry both the test harnesses and the test workers load."""

from agent_harness_protocol import ContextRetentionDisposition as Retention
from agent_harness_protocol import UserHistoryVisibility as Visibility

from wire.profiles import AgentProfile, CancellationSemantics, ModelSpec

MODEL_ID = "ahp-controlled-model"
CONTROLLED = "tests.support.controlled_model:ControlledChatModel"
CONFIRMED = CancellationSemantics.COROUTINE_TERMINATION_CONFIRMS_WORK_STOPPED
UNCONFIRMED = CancellationSemantics.UNCONFIRMED


def _profile(
    name: str,
    *,
    cancellation: CancellationSemantics = CONFIRMED,
    retention: Retention = Retention.UNKNOWN,
    visibility: Visibility = Visibility.UNKNOWN,
    **options: str | int | bool | None,
) -> AgentProfile:
    return AgentProfile(
        name=name,
        model=ModelSpec(CONTROLLED, options),
        model_id=MODEL_ID,
        cancellation=cancellation,
        retention=retention,
        history_visibility=visibility,
    )


_ALL = [
    _profile("confirmed"),
    _profile("unconfirmed", cancellation=UNCONFIRMED),
    _profile("ignoring", ignore_cancellation=True),
    _profile("load", load_chunks=400, reply="load-complete"),
    # Streams for ~2 s, then holds (while the boundary holds) before its reply.
    _profile(
        "streaming",
        load_chunks=40,
        chunk_delay_ms=50,
        hold_before_reply=True,
        reply="stream-complete",
    ),
    _profile("lifecycle", cancellation=UNCONFIRMED, scripted=True, ignore_cancellation=True),
    _profile("metered", input_tokens=7, output_tokens=3),
    # Each run's answer names its worker process: a stale run's answer is recognisable.
    _profile("tagged", reply_tagged=True),
    _profile("accounting", input_tokens=7, output_tokens=3, reply="measured-result"),
    # Scripted per boundary scope (the outcome suite controls the model without task ids).
    _profile("outcome", scripted=True, script_by_scope=True),
    # Scripted per boundary scope; its script's "ask" pauses the run for an approval.
    _profile("asking", scripted=True, script_by_scope=True),
    # A model that streams for about a second unless cancelled.
    _profile("slow", load_chunks=20, chunk_delay_ms=50),
    _profile("slow-unconfirmed", cancellation=UNCONFIRMED, load_chunks=20, chunk_delay_ms=50),
    _profile("undeclared"),
    _profile("ephemeral-hidden", retention=Retention.EPHEMERAL, visibility=Visibility.HIDDEN),
    _profile(
        "materialized-visible", retention=Retention.MATERIALIZED, visibility=Visibility.VISIBLE
    ),
    _profile("ephemeral-undeclared", retention=Retention.EPHEMERAL),
]

PROFILES = {profile.name: profile for profile in _ALL}
