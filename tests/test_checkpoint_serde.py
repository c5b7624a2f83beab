"""The message-caching checkpoint serializer writes exactly what upstream's writes.

Each case encodes a growing history turn after turn, the way a session's checkpoints
reuse their message objects, and compares every document with the one
``JsonPlusRedisSerializer`` encodes from scratch: a reused entry that went stale (a
message changed between two checkpoints) shows up as a difference.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer

from workers.checkpoint_serde import MessageCachingSerializer
from workers.checkpoints import FencedRedisSaver


def _checkpoint(messages: list[BaseMessage]) -> dict[str, Any]:
    return {
        "v": 4,
        "id": "1f0",
        "ts": "2026-12-01T00:00:00+00:00",
        "channel_values": {"messages": list(messages), "jump_to": None},
        "channel_versions": {"messages": 3},
        "versions_seen": {"model": {"messages": 2}},
    }


def _turn(n: int) -> list[BaseMessage]:
    return [
        HumanMessage(f"question {n}", id=f"h{n}"),
        AIMessage(
            "",
            id=f"a{n}",
            tool_calls=[{"name": "word_count", "args": {"text": f"q{n}"}, "id": f"c{n}"}],
            usage_metadata={"input_tokens": n, "output_tokens": 1, "total_tokens": n + 1},
        ),
        ToolMessage(f"{n} words", tool_call_id=f"c{n}", id=f"t{n}"),
        AIMessage(f"answer {n}", id=f"r{n}", response_metadata={"model": "m"}),
    ]


def _same_bytes(
    cached: MessageCachingSerializer, messages: list[BaseMessage], thread: str = "t"
) -> None:
    with cached.checkpoint(thread):
        mine = cached.dumps_typed(_checkpoint(messages))
    assert mine == JsonPlusRedisSerializer().dumps_typed(_checkpoint(messages))


def test_a_growing_history_encodes_as_upstream() -> None:
    cached = MessageCachingSerializer()
    history: list[BaseMessage] = []
    for n in range(5):
        history.extend(_turn(n))
        _same_bytes(cached, history)


def test_it_reuses_the_encoding_of_an_unchanged_message() -> None:
    cached = MessageCachingSerializer()
    history = _turn(0)
    _same_bytes(cached, history)
    calls = 0
    original = JsonPlusRedisSerializer._default_handler

    def counting(self: Any, obj: Any) -> Any:
        nonlocal calls
        calls += self is cached
        return original(self, obj)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JsonPlusRedisSerializer, "_default_handler", counting)
        _same_bytes(cached, [*history, *_turn(1)])
    assert calls == 4  # the new turn's messages only


@pytest.mark.parametrize(
    ("index", "change"),
    [
        pytest.param(3, lambda m: setattr(m, "content", "edited"), id="field reassigned"),
        pytest.param(0, lambda m: setattr(m, "id", "other"), id="id reassigned"),
        pytest.param(3, lambda m: m.additional_kwargs.update(extra=1), id="empty dict filled"),
        pytest.param(3, lambda m: m.response_metadata.update(more=2), id="dict grew"),
        pytest.param(3, lambda m: m.response_metadata.update(model="n"), id="value edited"),
        pytest.param(
            1,
            lambda m: m.tool_calls.append({"name": "x", "args": {}, "id": "c9"}),
            id="list grew",
        ),
    ],
)
def test_a_message_changed_in_place_is_encoded_as_it_now_is(index: int, change: Any) -> None:
    cached = MessageCachingSerializer()
    history = _turn(0)
    _same_bytes(cached, history)
    change(history[index])
    _same_bytes(cached, history)


def test_outside_a_checkpoint_nothing_is_cached() -> None:
    cached = MessageCachingSerializer()
    message = HumanMessage("one", id="h")
    first = cached.dumps_typed([message])
    message.content = "two"
    assert cached.dumps_typed([message]) != first
    assert cached.dumps_typed([message]) == JsonPlusRedisSerializer().dumps_typed([message])


def test_threads_do_not_share_entries_and_are_bounded() -> None:
    cached = MessageCachingSerializer(threads=2)
    for thread in ("a", "b", "c"):
        _same_bytes(cached, _turn(0), thread)
    assert list(cached._previous) == ["b", "c"]
    cached.forget("b")
    assert list(cached._previous) == ["c"]


def test_a_clone_of_the_saver_reuses_what_the_saver_encoded() -> None:
    """LangGraph compiles a graph with ``saver.with_allowlist(...)``: a shallow clone of
    the saver with a clone of its serializer. Both must share the encodings kept."""
    saver = FencedRedisSaver(redis_url="redis://127.0.0.1:1/0")  # never connects here
    # Strict msgpack, as in a worker (``workers/__init__.py``), whatever this process
    # imported first: a permissive serializer is never cloned.
    saver.serde = MessageCachingSerializer(allowed_msgpack_modules=None)
    clone = saver.with_allowlist([("workers", "checkpoint_serde")])
    assert clone is not saver
    assert clone.serde is not saver.serde
    history = _turn(0)
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    metadata: Any = {"source": "loop", "step": 1}
    saver.checkpoint_document(config, _checkpoint(history), metadata)
    calls = 0
    original = JsonPlusRedisSerializer._default_handler

    def counting(self: Any, obj: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(self, obj)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JsonPlusRedisSerializer, "_default_handler", counting)
        clone.checkpoint_document(config, _checkpoint([*history, *_turn(1)]), metadata)
    assert calls == 4


def _stored(serde: MessageCachingSerializer, messages: list[BaseMessage]) -> Any:
    """The channel values as a checkpoint read back from Redis holds them."""
    with serde.checkpoint("t"):
        _, data = serde.dumps_typed(_checkpoint(messages))
    return orjson.loads(data)["channel_values"]


def test_reading_back_what_this_worker_wrote_gives_the_same_messages() -> None:
    saver = FencedRedisSaver(redis_url="redis://127.0.0.1:1/0")  # never connects here
    history = [*_turn(0), *_turn(1)]
    values = saver._recursive_deserialize(_stored(saver.serde, history))
    assert all(a is b for a, b in zip(values["messages"], history, strict=True))


def test_another_workers_messages_are_revived_once_and_equal_upstreams() -> None:
    writer, reader = MessageCachingSerializer(), MessageCachingSerializer()
    saver = FencedRedisSaver(redis_url="redis://127.0.0.1:1/0")
    saver.serde = reader
    stored = _stored(writer, _turn(0))
    first = saver._recursive_deserialize(stored)["messages"]
    upstream = FencedRedisSaver(redis_url="redis://127.0.0.1:1/0")
    upstream.serde = JsonPlusRedisSerializer()
    assert first == upstream._recursive_deserialize(stored)["messages"]
    again = saver._recursive_deserialize(_stored(writer, _turn(0)))["messages"]
    assert all(a is b for a, b in zip(again, first, strict=True))


def test_a_kept_message_changed_since_is_revived_again() -> None:
    writer, reader = MessageCachingSerializer(), MessageCachingSerializer()
    stored = _stored(writer, _turn(0))
    [first, *_] = [reader._revive_if_needed(document) for document in stored["messages"]]
    first.content = "changed in place"
    again = reader._revive_if_needed(stored["messages"][0])
    assert again is not first
    assert again.content == "question 0"


def test_the_revived_messages_are_bounded() -> None:
    writer, reader = MessageCachingSerializer(), MessageCachingSerializer(messages=3)
    for document in _stored(writer, [*_turn(0), *_turn(1)])["messages"]:
        reader._revive_if_needed(document)
    assert len(reader._revived) == 3
