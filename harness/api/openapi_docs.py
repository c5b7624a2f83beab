"""Documented error responses of the routes (all ``application/problem+json``)."""

from __future__ import annotations

from typing import Any

from .problems import Problem

_DESCRIPTIONS = {
    401: "No valid bearer token (``WWW-Authenticate`` says how to authenticate).",
    404: "No such resource for this tenant (unknown, expired, released, or another "
    "tenant's: all answer alike).",
    409: "The session is busy or blocked.",
    413: "The body or one of its texts is too large.",
    422: "The request is not valid (``issues`` lists why), or its requirements cannot be served.",
    503: "The harness could not reach Redis or the broker (``retry`` says whether "
    "repeating is safe).",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route that may answer these statuses with a problem."""
    return {
        status: {"model": Problem, "description": _DESCRIPTIONS[status]}
        for status in (401, 422, 503, *statuses)
    }


__all__ = ["problems"]
