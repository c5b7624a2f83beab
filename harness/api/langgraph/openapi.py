"""What the LangGraph routes document: their path ids, stream and empty answers, and the
problems each may answer with (``application/problem+json``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path

from wire import keys

from ..openapi_docs import problems

ThreadId = Annotated[
    str, Path(pattern=f"^{keys.ID_PATTERN}$", max_length=128, description="A thread id.")
]
RunId = Annotated[
    str, Path(pattern=f"^{keys.ID_PATTERN}$", max_length=128, description="A run id.")
]
AssistantId = Annotated[
    str, Path(pattern=f"^{keys.ID_PATTERN}$", max_length=128, description="An assistant id.")
]

STREAM_EVENT: dict[str, Any] = {
    "type": "object",
    "description": "One Server-Sent Event: its id, its name (metadata, values, updates, "
    "messages, custom, error, end) and its JSON data.",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string"},
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
}


def streamed(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a route that answers with a run's events."""
    return {
        200: {
            "description": "Server-Sent Events; Last-Event-ID resumes after any event's id.",
            "content": {"text/event-stream": {"schema": STREAM_EVENT}},
        },
        **problems(*statuses),
    }


def answered(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a route that answers with JSON."""
    return problems(*statuses)


def empty(status: int, description: str, *statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a route that may answer without a body."""
    return {status: {"description": description}, **problems(*statuses)}


__all__ = ["AssistantId", "RunId", "ThreadId", "answered", "empty", "streamed"]
