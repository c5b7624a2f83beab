"""The official LangGraph Python client (``langgraph-sdk``) against the API's LangGraph
dialect (issue 22; contract: the router in ``harness.api.langgraph``).

Every client is ``langgraph_sdk.get_client`` over a real socket (``live_server``), always
with an explicit ``api_key`` so no ``LANGGRAPH_API_KEY``/``LANGSMITH_API_KEY`` of the
environment leaks in. Observations of what ran come from the model boundary and the tools
(``tests.support.boundary``); the client's answers are what is under test, not evidence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import aclosing, contextmanager
from typing import Any

import httpx
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.schema import StreamMode, StreamPart

from .api import TOKENS, problem_of
from .boundary import ModelBoundary

STREAM_MODES: list[StreamMode] = ["values", "messages-tuple", "updates"]


def sdk(url: str, tenant: str = "alpha") -> LangGraphClient:
    """The SDK's async client of ``url`` with ``tenant``'s key (sent as ``x-api-key``)."""
    return get_client(url=url, api_key=TOKENS[tenant])


@contextmanager
def held(boundary: ModelBoundary) -> Iterator[None]:
    """The boundary holds model calls until released, and surely at exit: a test that
    fails while a call is held still lets its server stop (it waits for open requests)."""
    boundary.hold()
    try:
        yield
    finally:
        boundary.release()


def human(*texts: str) -> dict[str, Any]:
    """A run input as the SDK's users write it: LangChain-style user messages."""
    return {"messages": [{"role": "user", "content": text} for text in texts]}


async def collect(stream: Any, limit: int | None = None) -> list[StreamPart]:
    """The parts of an SDK stream, to its end or the first ``limit``; the stream is closed
    on return (its connection with it), as a client that goes away closes it."""
    parts: list[StreamPart] = []
    async with aclosing(stream) as open_stream:
        async for part in open_stream:
            parts.append(part)
            if limit is not None and len(parts) >= limit:
                break
    return parts


def text_of(message: Mapping[str, Any]) -> str:
    """A LangChain message dict's text (content a string or a list of text blocks)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(
        str(block.get("text", "")) if isinstance(block, Mapping) else str(block)
        for block in content or ()
    )


def last_ai(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """The last AI message of a thread's state values."""
    messages = [m for m in values.get("messages", ()) if m.get("type") in {"ai", "AIMessage"}]
    assert messages, f"no AI message in {values}"
    last: Mapping[str, Any] = messages[-1]
    return last


def run_id_of(parts: Sequence[StreamPart]) -> str:
    """The run id the stream's first event (``metadata``) names."""
    assert parts, "an empty stream"
    assert parts[0].event == "metadata", parts[0]
    return str(parts[0].data["run_id"])


def wire(parts: Sequence[StreamPart]) -> list[tuple[str | None, str, Any]]:
    """A stream as comparable triples: (id, event, data)."""
    return [(part.id, part.event, part.data) for part in parts]


def assert_unique_ids(parts: Sequence[Any]) -> None:
    """Every event of a stream has an id, and no two share one (an SDK ``StreamPart`` or
    the JS client's part as a dict)."""

    def ident(part: Any) -> Any:
        return part.get("id") if isinstance(part, Mapping) else part.id

    def event(part: Any) -> Any:
        return part.get("event") if isinstance(part, Mapping) else part.event

    ids = [ident(part) for part in parts]
    assert all(ids), [(ident(p), event(p)) for p in parts]
    shared = {i for i in ids if ids.count(i) > 1}
    assert not shared, [(ident(p), event(p)) for p in parts if ident(p) in shared]


def status_of(error: BaseException) -> int:
    """The HTTP status of an error the SDK raised: its typed errors (``ConflictError``, ...)
    and the plain ``httpx.HTTPStatusError`` of ``runs.wait``/``join`` are both
    ``HTTPStatusError``s."""
    assert isinstance(error, httpx.HTTPStatusError), repr(error)
    return error.response.status_code


def problem(error: BaseException, status: int) -> Mapping[str, Any]:
    """The RFC 9457 problem an SDK call was refused with, checked to be one with
    ``status``."""
    assert status_of(error) == status, (status_of(error), error.response.text)  # type: ignore[attr-defined]
    return problem_of(error.response)  # type: ignore[attr-defined]


async def until_status(client: LangGraphClient, tid: str, rid: str, status: str) -> None:
    """Until the run reports ``status`` (within 30 s)."""
    async with asyncio.timeout(30):
        while (await client.runs.get(tid, rid))["status"] != status:  # noqa: ASYNC110 (polled over HTTP)
            await asyncio.sleep(0.05)


def texts(call: Mapping[str, object]) -> list[str]:
    """The texts of the messages a recorded model call received."""
    received = call["texts"]
    assert isinstance(received, list), call
    return [str(text) for text in received]


def model_inputs(calls: Sequence[Mapping[str, object]]) -> list[str]:
    """The last text each recorded model call received (the turn's newest input)."""
    return [texts(call)[-1] for call in calls]
