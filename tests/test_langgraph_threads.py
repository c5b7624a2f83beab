"""A thread's values across many runs: each run's ``values`` carry the whole
conversation, rebuilt from the earlier tasks' streams, in order, once each."""

from __future__ import annotations

from wire.settings import Settings

from .support.api import api_harness, live_server
from .support.boundary import ModelBoundary
from .support.langgraph import human, model_inputs, sdk, text_of


async def test_every_run_of_a_thread_sees_the_whole_conversation_in_order(
    settings: Settings, boundary: ModelBoundary
) -> None:
    turns = [f"turn {n}" for n in range(4)]
    with live_server(api_harness(settings, boundary)) as server:
        async with sdk(server.url) as client:
            tid = (await client.threads.create())["thread_id"]
            finals = [await client.runs.wait(tid, "confirmed", input=human(t)) for t in turns]
            state = await client.threads.get_state(tid)
    for count, final in enumerate(finals, 1):
        messages = final["messages"]
        assert [m["type"] for m in messages] == ["human", "ai"] * count
        assert [text_of(m) for m in messages if m["type"] == "human"] == turns[:count]
        assert len({m["id"] for m in messages}) == len(messages)
    assert state["values"]["messages"] == finals[-1]["messages"]
    # At the model: one call per turn, in order.
    assert model_inputs(boundary.calls()) == turns
