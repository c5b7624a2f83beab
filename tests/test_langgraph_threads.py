"""A thread's values across many runs: each run's ``values`` carry the whole
conversation, rebuilt from the earlier tasks' streams, in order, once each; also when
many runs were queued and none of them read (their bases unknown, the walk back over
the thread's run records crossing several pages)."""

from __future__ import annotations

from wire.settings import Settings

from .support.api import api_harness, live_server
from .support.boundary import ModelBoundary
from .support.langgraph import human, model_inputs, sdk, text_of


async def test_every_run_of_a_thread_sees_the_whole_conversation_in_order(
    settings: Settings, boundary: ModelBoundary
) -> None:
    waited_turns = [f"turn {n}" for n in range(12)]
    queued_turns = [f"queued {n}" for n in range(10)]
    with live_server(api_harness(settings, boundary)) as server:
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            finals = [
                await client.runs.wait(tid, "confirmed", input=human(t)) for t in waited_turns
            ]
            state = await client.threads.get_state(tid)
            # Ten runs queued behind each other, none read until the last is joined.
            queued = [
                await client.runs.create(
                    tid, "confirmed", input=human(t), multitask_strategy="enqueue"
                )
                for t in queued_turns
            ]
            last = await client.runs.join(tid, queued[-1]["run_id"])
            first_queued = await client.runs.join(tid, queued[0]["run_id"])
    for count, final in enumerate(finals, 1):
        messages = final["messages"]
        assert [m["type"] for m in messages] == ["human", "ai"] * count
        assert [text_of(m) for m in messages if m["type"] == "human"] == waited_turns[:count]
        assert len({m["id"] for m in messages}) == len(messages)
    assert state["values"]["messages"] == finals[-1]["messages"]
    everything = waited_turns + queued_turns
    assert [text_of(m) for m in last["messages"] if m["type"] == "human"] == everything
    assert [m["type"] for m in last["messages"]] == ["human", "ai"] * len(everything)
    assert first_queued["messages"] == last["messages"][: 2 * (len(waited_turns) + 1)]
    # At the model: one call per turn, in order.
    assert model_inputs(boundary.calls()) == everything
