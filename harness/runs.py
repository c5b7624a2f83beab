"""A run: a new session and its first task, started as one step for the caller.

The HTTP API's ``POST /v1/tasks`` (LangGraph's stateless runs) and any Python caller that
delegates one task without managing a session use :func:`start_run`. Everything is
checked before anything is written. If the start fails, the session is released before
the error reaches the caller (an unconfirmed start is stopped within the cleanup budget,
never cut off mid-run); once started, the step that settles the task releases a
single-task session, wherever it runs.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_harness_protocol import (
    HarnessTransportError,
    SessionSpec,
    TaskRequest,
    TaskStartUnconfirmedError,
)

from wire.tenants import TenantLimits

from .admission import validate_task
from .errors import CeleryHarnessError

if TYPE_CHECKING:
    from .harness import CeleryHarness
    from .session import CelerySession
    from .task import CeleryTask

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StartedRun:
    """The session a run created and the task it started in it."""

    session: CelerySession
    task: CeleryTask


async def start_run(
    harness: CeleryHarness,
    spec: SessionSpec,
    request: TaskRequest,
    *,
    tenant: str | None = None,
    keep: bool = False,
    limits: TenantLimits | None = None,
) -> StartedRun:
    """Create a session for ``spec`` and start ``request`` in it: a single-task session,
    or with ``keep`` one that stays open for more tasks (the caller then owns it).
    ``limits``: the tenant's, as for ``CelerySession.start_task``; a start they refuse
    releases the session again (``TenantLimitError``: nothing is left).

    Raises:
        IncompatibleRequirementError: the spec or the request cannot be served here;
            nothing was written.
        TaskStartUnconfirmedError: whether the task started is unknown; the session was
            released, which stops the task within the cleanup budget if it runs.
        HarnessTransportError: the session or the start could not be written; the session
            (if created) was released.
    """
    harness.validate(spec).require_compatible()
    validate_task(request, harness.profile).require_compatible()
    session = await harness.create_session(spec, tenant=tenant, single_task=not keep)
    try:
        task = await session.start_task(request, limits=limits)
    except TaskStartUnconfirmedError as error:
        # It may run (a worker may hold it already): stop it within the cleanup budget
        # as a release stops a session's task, so it ends Cancelled (or as it ended).
        unconfirmed = error.reference.request_id
        await asyncio.shield(_release_quietly(session, harness, tenant, unconfirmed))
        raise
    except BaseException:
        await asyncio.shield(_release_quietly(session))
        raise
    return StartedRun(session, task)


async def _release_quietly(
    session: CelerySession,
    harness: CeleryHarness | None = None,
    tenant: str | None = None,
    unconfirmed: str = "",
) -> None:
    """Release a run's session after its start failed; with ``unconfirmed`` (the task
    whose start is unknown), the session's handle first adopts that task, so the release
    stops it within the cleanup budget."""
    try:
        if harness is not None and unconfirmed:
            session.adopt(await harness.attach_task(unconfirmed, tenant=tenant))
        await session.release()
    except (CeleryHarnessError, HarnessTransportError) as error:
        log.warning("session %s: releasing after a failed start failed: %s", session.id, error)


__all__ = ["StartedRun", "start_run"]
