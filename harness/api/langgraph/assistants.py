"""Assistants (the deployment's agent profile), and the server's health and capabilities."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter

from .access import Service, Tenant
from .bodies import AssistantSearch
from .openapi import AssistantId, answered
from .service import not_found

router = APIRouter(tags=["langgraph"])

_STARTED = datetime.now(tz=UTC).isoformat()
"""When this process started: the assistant's creation time as far as it knows."""


def _assistant(service_profile: str, description: str | None) -> dict[str, Any]:
    return {
        "assistant_id": service_profile,
        "graph_id": service_profile,
        "name": service_profile,
        "description": description,
        "config": {},
        "context": {},
        "metadata": {},
        "version": 1,
        "created_at": _STARTED,
        "updated_at": _STARTED,
    }


def _of(service: Service) -> dict[str, Any]:
    profile = service.api.harness.profile
    return _assistant(profile.name, getattr(profile, "description", None) or None)


@router.post("/assistants/search", responses=answered(), summary="Search assistants")
async def search_assistants(
    body: AssistantSearch, _: Tenant, service: Service
) -> list[dict[str, Any]]:
    assistant = _of(service)
    matches = (
        (body.graph_id is None or body.graph_id == assistant["graph_id"])
        and (body.name is None or body.name == assistant["name"])
        and not body.metadata
    )
    return [assistant][body.offset : body.offset + body.limit] if matches else []


@router.get("/assistants/{assistant_id}", responses=answered(404), summary="Get an assistant")
async def get_assistant(assistant_id: AssistantId, _: Tenant, service: Service) -> dict[str, Any]:
    assistant = _of(service)
    if assistant_id != assistant["assistant_id"]:
        raise not_found("assistant", assistant_id)
    return assistant


@router.get(
    "/assistants/{assistant_id}/graph", responses=answered(404), summary="Get an assistant's graph"
)
async def get_graph(
    assistant_id: str, _: Tenant, service: Service, xray: str = "false"
) -> dict[str, Any]:
    await get_assistant(assistant_id, _, service)
    return {
        "nodes": [
            {"id": "__start__", "type": "schema", "data": "__start__"},
            {"id": "agent", "type": "runnable", "data": {"id": ["ahp", "agent"], "name": "agent"}},
            {"id": "tools", "type": "runnable", "data": {"id": ["ahp", "tools"], "name": "tools"}},
            {"id": "__end__", "type": "schema", "data": "__end__"},
        ],
        "edges": [
            {"source": "__start__", "target": "agent"},
            {"source": "agent", "target": "tools", "conditional": True},
            {"source": "tools", "target": "agent"},
            {"source": "agent", "target": "__end__", "conditional": True},
        ],
    }


@router.get("/ok", summary="Health (LangGraph)")
async def ok() -> dict[str, bool]:
    return {"ok": True}


@router.get("/info", summary="Capabilities (LangGraph)")
async def info() -> dict[str, Any]:
    return {
        "version": "agent-harness-protocol-celery",
        "langgraph_py_version": None,
        "flags": {
            "assistants": True,
            "crons": False,
            "langsmith": False,
            "strict_resume": False,
            "resumable_streams": True,
            "multitask_strategies": ["reject", "enqueue", "interrupt"],
        },
        "metadata": {},
    }


__all__ = ["router"]
