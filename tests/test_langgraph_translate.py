"""The LangGraph dialect's message dicts are LangChain's own: ``ai_message`` builds what
``AIMessage(...).model_dump()`` would (without the model, for speed), and a translation
reads the same entries to the same events, in each mode those of that mode."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage

from harness.api.langgraph.translate import (
    FIRST_ENTRY,
    RunTranslation,
    ai_message,
    event_position,
)
from wire.event_codec import SEMANTIC, TERMINAL_TAG


@pytest.mark.parametrize(("text", "message_id"), [("an answer", "m-1"), ("", None), ("é", "x")])
def test_ai_message_is_what_langchain_dumps(text: str, message_id: str | None) -> None:
    assert ai_message(text, message_id) == AIMessage(content=text, id=message_id).model_dump()


def _entries() -> list[tuple[str, dict[str, str]]]:
    def entry(tag: str, data: object) -> dict[str, str]:
        return {"k": SEMANTIC, "t": tag, "d": json.dumps(data)}

    return [
        ("1-0", entry("delta", {"text": "hel", "message_id": "m"})),
        ("1-1", entry("delta", {"text": "lo", "message_id": "m"})),
        ("2-0", entry("message", {"text": "hello", "message_id": "m"})),
        ("3-0", entry(TERMINAL_TAG, {})),
    ]


def _events(modes: frozenset[str]) -> list[tuple[str, str, object]]:
    translation = RunTranslation("r", "t", modes, FIRST_ENTRY, (), "hi", "task")
    events = translation.opening()
    for entry_id, fields in _entries():
        events.extend(translation.feed(entry_id, fields))
    assert translation.terminal
    assert [m["type"] for m in translation.messages] == ["human", "ai"]
    return [(e.id, e.event, e.data) for e in events]


def test_each_mode_gets_the_events_of_the_run_with_all_modes_in_order() -> None:
    every = _events(frozenset({"values", "updates", "messages-tuple", "custom"}))
    assert [name for _, name, _ in every] == [
        "metadata",
        "values",
        "messages",
        "messages",
        "updates",
        "values",
        "values",
    ]
    for modes in ({"values"}, {"updates"}, {"messages-tuple"}, {"values", "messages-tuple"}):
        names = {"messages" if m == "messages-tuple" else m for m in modes} | {"metadata"}
        wanted = [(name, data) for _, name, data in every if name in names]
        got = _events(frozenset(modes))
        assert [(name, data) for _, name, data in got] == wanted, modes
        # Ids are numbered within the stream asked for: unique, increasing.
        positions = [event_position(ident) for ident, _, _ in got]
        assert positions == sorted(set(positions)), modes
    # No mode: the entries build the thread's state and make no event but the opening.
    assert [name for _, name, _ in _events(frozenset())] == ["metadata"]
