"""The LangGraph server dialect: the API the official ``langgraph-sdk`` clients speak,
over the same harness, tenants and guarantees as ``/v1`` (docs/langgraph-sdk.md)."""

from __future__ import annotations

from fastapi import APIRouter

from . import assistants, runs, threads

router = APIRouter()
router.include_router(assistants.router)
router.include_router(threads.router)
router.include_router(runs.router)

__all__ = ["router"]
