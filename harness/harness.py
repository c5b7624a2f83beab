"""``CeleryHarness``: the AHP port whose tasks run on a Celery worker pool."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from uuid import uuid4

from agent_harness_protocol import (
    AgentHarness,
    AgentSession,
    AgentUsage,
    CleanupBudget,
    CompatibilityReport,
    ProviderId,
    SessionId,
    SessionSpec,
    SupportReport,
)

from wire.codec import dumps, spec_to_json, usage_to_json
from wire.profiles import AgentProfile, load_profiles, resolve_profile
from wire.provider import PROVIDER
from wire.settings import Settings

from .admission import support_report, validate_session
from .errors import CheckpointCleanupError
from .runtime import CallerRuntime
from .session import CelerySession


def _observe(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()


class CeleryHarness(AgentHarness):
    """Delegate AHP tasks to Celery workers through Redis.

    Construction does no I/O; Redis clients open on first use inside the running event
    loop, and the harness must stay on that loop.

    Args:
        settings: The deployment's settings (default: from the environment).
        profile: The agent profile (or its name in the settings' registry) that workers
            run for this harness's sessions.
        profiles: The registry to resolve a profile name in (default: the settings').
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        profile: AgentProfile | str | None = None,
        profiles: Mapping[str, AgentProfile] | None = None,
    ) -> None:
        self._settings = settings if settings is not None else Settings()
        if isinstance(profile, AgentProfile):
            self._profile = profile
        else:
            registry = profiles if profiles is not None else load_profiles(self._settings.profiles)
            self._profile = resolve_profile(registry, profile or self._settings.profile)
        self._budget = CleanupBudget(
            per_task=self._settings.cleanup_per_task,
            total=self._settings.cleanup_total,
            aggregates_across_resources=True,
        )
        self._runtime: CallerRuntime | None = None
        self._closed = False
        self._close_task: asyncio.Task[None] | None = None

    @property
    def profile(self) -> AgentProfile:
        return self._profile

    @property
    def provider(self) -> ProviderId:
        return PROVIDER

    @property
    def support(self) -> SupportReport:
        return support_report(self._profile)

    @property
    def cleanup_budget(self) -> CleanupBudget:
        return self._budget

    def validate(self, spec: SessionSpec) -> CompatibilityReport:
        return validate_session(self._profile, spec)

    def _open(self) -> CallerRuntime:
        if self._runtime is None:
            self._runtime = CallerRuntime.open(self._settings, self._profile)
        return self._runtime

    async def create_session(self, spec: SessionSpec) -> AgentSession:
        """Admit ``spec`` and write the session record; no native work starts."""
        if self._closed:
            raise RuntimeError("harness is closed")
        self.validate(spec).require_compatible()
        runtime = self._open()
        session_id = SessionId(uuid4().hex)
        await runtime.store.create_session(
            session_id.value,
            {
                "spec": dumps(spec_to_json(spec)),
                "profile": self._profile.name,
                "profile_digest": self._profile.digest,
                "persistent": "0",
                "active": "",
                "closed": "0",
                "usage": dumps(usage_to_json(AgentUsage.ZERO)),
            },
        )
        session = CelerySession(runtime, session_id, spec)
        runtime.sessions.add(session)
        return session

    async def aclose(self) -> None:
        """Release every session within ``cleanup_budget.total``; idempotent and shielded.

        Raises:
            CheckpointCleanupError: stored context of some sessions may remain; every
                task is still settled and every handle closed.
        """
        if self._close_task is None:
            self._closed = True
            self._close_task = asyncio.create_task(self._close_all())
            self._close_task.add_done_callback(_observe)
        await asyncio.shield(self._close_task)

    async def _close_all(self) -> None:
        runtime = self._runtime
        if runtime is None:
            return
        runtime.closed = True
        try:
            sessions = tuple(runtime.sessions)
            failures: dict[SessionId, BaseException] = {}
            if sessions:
                releases = {asyncio.ensure_future(s.release()): s for s in sessions}
                done, pending = await asyncio.wait(
                    releases, timeout=self._budget.total.total_seconds()
                )
                for release in pending:
                    release.cancel()
                    session = releases[release]
                    await session.force_unresolved_cleanup()
                    failures[session.id] = TimeoutError("cleanup budget exhausted")
                for release in done:
                    error = release.exception()
                    if isinstance(error, CheckpointCleanupError):
                        failures.update(error.failures)
                    elif error is not None:
                        failures[releases[release].id] = error
            if failures:
                raise CheckpointCleanupError(failures)
        finally:
            await runtime.aclose()


__all__ = ["CeleryHarness"]
