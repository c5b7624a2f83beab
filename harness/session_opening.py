"""How a harness opens a session handle in Redis: a new session's record written, or a
persistent context reopened under a handle of its own.

The harness checks first what needs no Redis (a closed harness, the ids, the spec's
compatibility); both steps here then refuse a Redis without the modules checkpoints need
before they write anything, and register the handle of a persistent session with the
runtime, which keeps it alive until it is dropped.
"""

from __future__ import annotations

import contextlib
from uuid import uuid4

from agent_harness_protocol import AgentUsage, SessionId, SessionSpec
from redis.exceptions import RedisError

from wire.codec import dumps, spec_to_json, usage_to_json
from wire.records import SessionField

from .lookups import raise_for_reopen
from .redis_errors import reported
from .runtime import CallerRuntime
from .session import CelerySession


async def new_session(
    runtime: CallerRuntime,
    spec: SessionSpec,
    run_metadata: str,
    *,
    tenant: str,
    single_task: bool,
) -> CelerySession:
    """Write a new session's record for ``spec`` (``run_metadata``: its labels as JSON;
    ``tenant``: its owner, ``""`` for none) and open its handle.

    Raises:
        ValueError: a single-task session was asked to be persistent.
        RedisModulesMissingError: the checkpoint Redis lacks the Query Engine or JSON.
        HarnessTransportError: Redis could not be reached or refused the write.
    """
    await runtime.require_checkpoint_modules()
    session_id = SessionId(uuid4().hex)
    persistent = spec.requirements.persistence is not None
    if persistent and single_task:
        raise ValueError("a single-task session cannot be persistent")
    handle_id = uuid4().hex if persistent else None
    with reported("the session was not created"):
        await _write_session(
            runtime, session_id, spec, run_metadata, persistent, handle_id, tenant, single_task
        )
    if handle_id is not None:
        runtime.track_handle(session_id.value, handle_id)
    session = CelerySession(
        runtime, session_id, spec, handle_id=handle_id, single_task=single_task, tenant=tenant
    )
    runtime.sessions.add(session)
    return session


async def _write_session(
    runtime: CallerRuntime,
    session_id: SessionId,
    spec: SessionSpec,
    run_metadata: str,
    persistent: bool,
    handle_id: str | None,
    tenant: str,
    single_task: bool,
) -> None:
    profile = runtime.profile
    fields = {
        SessionField.SPEC: dumps(spec_to_json(spec)),
        SessionField.PROFILE: profile.name,
        SessionField.PROFILE_DIGEST: profile.digest,
        SessionField.PERSISTENT: "1" if persistent else "0",
        SessionField.ACTIVE: "",
        SessionField.CLOSED: "0",
        SessionField.TURNS: "0",
        SessionField.USAGE: dumps(usage_to_json(AgentUsage.ZERO)),
        SessionField.METADATA: run_metadata,
        SessionField.TENANT: tenant,
    }
    if single_task:
        fields[SessionField.SINGLE] = "1"
    await runtime.store.create_session(session_id.value, fields)
    if handle_id is not None:
        try:
            await runtime.store.touch_handles(session_id.value, (handle_id,), runtime.handle_ttl_ms)
        except RedisError:
            with contextlib.suppress(RedisError):  # no handle: nobody can use it
                await runtime.redis.delete(runtime.keys.session(session_id.value))
            raise


async def reopened_session(
    runtime: CallerRuntime, context_id: str, spec: SessionSpec
) -> CelerySession:
    """Open a new handle on the persistent context ``context_id``, configured by ``spec``.

    Raises:
        RedisModulesMissingError: the checkpoint Redis lacks the Query Engine or JSON.
        UnknownPersistentSessionError, PersistentConfigurationError, SessionBlockedError,
        SessionBusyError, StoredHistoryUnavailableError: the reopen script refused
            (``harness.lookups.raise_for_reopen``).
        HarnessTransportError: Redis could not be reached or refused the write.
    """
    await runtime.require_checkpoint_modules()
    session_id = SessionId(context_id)
    handle_id = uuid4().hex
    profile = runtime.profile
    with reported("the session was not reopened"):
        result, detail = await runtime.store.reopen(
            context_id,
            dumps(spec_to_json(spec)),
            handle_id,
            runtime.handle_ttl_ms,
            (profile.name, profile.digest),
        )
    raise_for_reopen(session_id, result, detail)
    runtime.track_handle(context_id, handle_id)
    session = CelerySession(runtime, session_id, spec, handle_id=handle_id)
    runtime.sessions.add(session)
    return session


__all__ = ["new_session", "reopened_session"]
