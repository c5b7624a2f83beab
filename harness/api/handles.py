"""The API's handles on sessions and tasks: those it created, and attached ones.

A request names a session or task by id; the handle that serves it is the one this
process created, or one attached from Redis on a miss (``attach_session`` /
``attach_task``), so any API replica, or this one after a restart, serves any id. Handles
are keyed by tenant and id: another tenant's id never reaches a cached handle, and its
attach fails exactly like an unknown id's. Concurrent misses of one key share one attach.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

from harness.harness import CeleryHarness
from harness.session import CelerySession
from harness.task import CeleryTask

H = TypeVar("H")
Key = tuple[str, str]


class Handles:
    def __init__(self, harness: CeleryHarness, task_capacity: int) -> None:
        self._harness = harness
        self._capacity = task_capacity
        self._sessions: dict[Key, CelerySession] = {}
        self._tasks: OrderedDict[Key, CeleryTask] = OrderedDict()
        self._attaching: dict[tuple[str, Key], asyncio.Future[object]] = {}

    # -- sessions ---------------------------------------------------------------------
    def add_session(self, tenant: str, session: CelerySession) -> None:
        self._sessions[(tenant, session.id.value)] = session

    def drop_session(self, tenant: str, session_id: str) -> None:
        self._sessions.pop((tenant, session_id), None)

    def cached_session(self, tenant: str, session_id: str) -> CelerySession | None:
        return self._sessions.get((tenant, session_id))

    async def session(self, tenant: str, session_id: str) -> CelerySession:
        """This process's handle on the session, attached on a miss.

        Raises:
            UnknownSessionError: unknown, released or another tenant's.
        """
        key = (tenant, session_id)
        cached = self._sessions.get(key)
        if cached is not None:
            return cached

        async def attach() -> CelerySession:
            session = await self._harness.attach_session(session_id, tenant=tenant)
            self._sessions[key] = session
            return session

        return await self._once("session", key, attach)

    # -- tasks --------------------------------------------------------------------------
    def add_task(self, tenant: str, task: CeleryTask) -> None:
        key = (tenant, task.id.value)
        self._tasks[key] = task
        self._tasks.move_to_end(key)
        while len(self._tasks) > self._capacity:
            self._tasks.popitem(last=False)  # a later request attaches it again

    async def task(self, tenant: str, task_id: str) -> CeleryTask:
        """This process's handle on the task, attached on a miss.

        Raises:
            UnknownTaskError: unknown, expired or another tenant's.
        """
        key = (tenant, task_id)
        cached = self._tasks.get(key)
        if cached is not None:
            self._tasks.move_to_end(key)
            return cached

        async def attach() -> CeleryTask:
            task = await self._harness.attach_task(task_id, tenant=tenant)
            self.add_task(tenant, task)
            return task

        return await self._once("task", key, attach)

    async def _once(self, kind: str, key: Key, attach: Callable[[], Awaitable[H]]) -> H:
        pending = self._attaching.get((kind, key))
        if pending is not None:
            return cast(H, await asyncio.shield(pending))
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._attaching[(kind, key)] = future
        try:
            handle = await attach()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved: a lone waiter-less failure is not logged
            raise
        else:
            future.set_result(handle)
            return handle
        finally:
            self._attaching.pop((kind, key), None)


__all__ = ["Handles"]
