"""``ahp-celery run "<prompt>"``: start one task through the Python harness, follow it live.

The task runs on the deployment's workers (settings from the environment). The terminal
shows a spinner while the task waits for a worker, the answer as it streams, tool calls
and effects as lines, and asks for approvals and answers to questions when the task needs
them; at the end it shows the outcome with the task's and the session's usage. ``--json``
prints JSON lines instead (see ``JsonView``).

Ctrl-C (or SIGTERM) once requests the task's cancellation and keeps following it, so the
outcome is still shown; a second press stops waiting (``ExitCode.INTERRUPTED``).

Sessions: a new one is created (``--persistent``: one that outlives this process), or
``--session-id`` continues an existing persistent one. Closing the harness at the end
releases this process's handle: a new non-persistent session is deleted, a persistent one
keeps its context. A non-persistent session made elsewhere is never continued here, as
that release would delete it. On a busy session the start is refused (the AHP default),
or with ``--enqueue`` queued behind the unsettled task (the spinner says so).
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import typer
from agent_harness_protocol import (
    AgentTask,
    HarnessTransportError,
    IncompatibleRequirementError,
    InteractionRequest,
    InteractionRequested,
    InteractionResponse,
    InteractionResponseUnconfirmedError,
    PersistenceRequirement,
    RequirementUnconfirmedError,
    SessionBlockedError,
    SessionRequirements,
    SessionSpec,
    TaskEvent,
    TaskOutcome,
    TaskRequest,
    TaskStartUnconfirmedError,
    TaskState,
    TextInput,
)

from harness import (
    BusyPolicy,
    CeleryHarness,
    CeleryHarnessError,
    CelerySession,
    CeleryTask,
    InteractionClosedError,
    SessionBusyError,
)
from wire.queues import queue_of
from wire.settings import Settings
from wire.tracing_setup import configure_tracing, flush_tracing

from .interactions import ask, in_thread, unattended
from .render import to_json
from .run_views import ExitCode, JsonView, LiveView, View, exit_code

__all__ = [
    "ExitCode",
    "JsonView",
    "LiveView",
    "RunRequest",
    "exit_code",
    "harness_for",
    "run",
    "run_task",
]


CLEANUP_MARGIN = 5.0
"""Seconds beyond the harness's cleanup budget before the exit stops waiting for it."""


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What ``ahp-celery run`` was asked to do."""

    prompt: str
    session_id: str | None = None
    """Continue this session instead of creating one."""
    instructions: str | None = None
    persistent: bool = False
    profile: str | None = None
    """The agent profile (default: the settings')."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """Run metadata labels for the session's runs (tracing tags)."""
    interactive: bool = True
    """Ask at the terminal; otherwise approvals are declined and questions cancel."""
    tenant: str | None = None
    """The tenant that owns a new session / must own the continued one (None: any)."""
    enqueue: bool = False
    """On a busy session, queue behind its unsettled task instead of being refused."""


# -- Ctrl-C ------------------------------------------------------------------------------


class _CtrlC:
    """First SIGINT/SIGTERM: request the task's cancellation (now, or as soon as it
    started). Second: cancel the main coroutine (stop waiting)."""

    def __init__(self, view: View) -> None:
        self.presses = 0
        self._view = view
        self._task: AgentTask | None = None
        self._main = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self._requests: set[asyncio.Future[None]] = set()
        # Only the main thread receives signals (a run embedded in another thread has none).
        self._signals = threading.current_thread() is threading.main_thread()
        if self._signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._loop.add_signal_handler(signum, self._press)

    def close(self) -> None:
        if self._signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._loop.remove_signal_handler(signum)

    def _press(self) -> None:
        self.presses += 1
        if self.presses == 1:
            self._view.note("Cancelling the task (Ctrl-C again to stop waiting for it) ...")
            if self._task is not None:
                self.cancel_task()
        elif self._main is not None:
            self._main.cancel()

    def follow(self, task: AgentTask) -> None:
        self._task = task
        if self.presses:
            self.cancel_task()

    def cancel_task(self) -> None:
        if self._task is None:
            return
        request = asyncio.ensure_future(self._task.request_cancellation())
        self._requests.add(request)
        request.add_done_callback(self._requested)

    def _requested(self, request: asyncio.Future[None]) -> None:
        self._requests.discard(request)
        if request.cancelled():
            return
        error = request.exception()
        if error is not None:
            self._view.note(f"the cancellation was not recorded: {type(error).__name__}: {error}")


# -- interactions ------------------------------------------------------------------------


class _Follower:
    def __init__(
        self,
        task: AgentTask,
        events: AsyncIterator[TaskEvent],
        view: View,
        ctrl_c: _CtrlC,
        request: RunRequest,
        prompts_on_stderr: bool,
    ) -> None:
        self._task = task
        self._events = events
        self._view = view
        self._ctrl_c = ctrl_c
        self._interactive = request.interactive
        self._stderr = prompts_on_stderr
        self._outcome = asyncio.ensure_future(task.await_outcome())

    async def follow(self) -> TaskOutcome:
        try:
            async for event in self._events:
                self._view.event(event)
                if isinstance(event, InteractionRequested):
                    await self._answer(event.request)
            return await self._outcome
        finally:
            if not self._outcome.done():
                self._outcome.cancel()

    async def _answer(self, request: InteractionRequest) -> None:
        response: InteractionResponse | None
        if not self._interactive:
            response = unattended(request)
            if response is not None:
                answer = json.dumps(to_json(response))
                self._view.note(f"No terminal to ask: answered {request.interaction_id} {answer}")
        else:
            prompt = in_thread(lambda: ask(request, err=self._stderr))
            racing: set[asyncio.Future[Any]] = {prompt, self._outcome}
            await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
            if not prompt.done():
                self._view.note("The task ended before the answer; it is not sent.")
                return
            try:
                response = prompt.result()
            except (typer.Abort, EOFError):  # stdin closed: nobody will answer
                response = None
        if response is None:
            self._view.note("The task needs an answer that cannot be given here; cancelling it.")
            self._ctrl_c.cancel_task()
            return
        try:
            await self._task.respond(request.interaction_id, response)
        except (InteractionResponseUnconfirmedError, HarnessTransportError) as error:
            self._view.note(f"The answer may not have arrived: {type(error).__name__}: {error}")
        except (ValueError, LookupError, InteractionClosedError) as error:
            # Refused, or cleared (cancelled, the task ended) or answered meanwhile.
            self._view.note(f"The answer was not accepted: {error}")


# -- the run -----------------------------------------------------------------------------

_REFUSALS = (
    CeleryHarnessError,
    HarnessTransportError,
    IncompatibleRequirementError,
    RequirementUnconfirmedError,
    SessionBlockedError,
    ValueError,
)
"""What the harness raises when a session or task could not be opened or started."""


def _spec(request: RunRequest) -> SessionSpec:
    persistence = PersistenceRequirement() if request.persistent else None
    return SessionSpec(
        instructions=request.instructions,
        requirements=SessionRequirements(persistence=persistence),
    )


class NotPersistentError(ValueError):
    """``--session-id`` names a session that is not persistent: releasing this process's
    handle at exit would delete it, so it is continued only where it was created."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"session {session_id} is not persistent: this process would delete it when it "
            "exits; continue it where it was created (or over the HTTP API)"
        )


async def _open_session(harness: CeleryHarness, request: RunRequest) -> CelerySession:
    if request.session_id is None:
        return await harness.create_session(_spec(request), tenant=request.tenant)
    info = await harness.session_info(request.session_id, tenant=request.tenant)
    if not info.persistent:
        raise NotPersistentError(request.session_id)
    if not request.enqueue and info.active_task is not None:
        # Refused before attaching: an attached handle adopts the session's unsettled task,
        # and closing it at exit would stop that task, which another process started.
        active = await harness.task_info(info.active_task, tenant=request.tenant)
        if not active.state.is_terminal:
            raise SessionBusyError(request.session_id, info.active_task)
    return await harness.attach_session(request.session_id, tenant=request.tenant)


async def _close(harness: CeleryHarness, view: View) -> None:
    budget = harness.cleanup_budget.total.total_seconds() + CLEANUP_MARGIN
    try:
        async with asyncio.timeout(budget):
            await harness.aclose()
    except TimeoutError:
        view.note(f"closing the harness did not finish within {budget:g} s")
    except Exception as error:
        view.note(f"closing the harness failed: {type(error).__name__}: {error}")


NO_WORKER_NOTICE = timedelta(seconds=2)
"""How long a started task may wait unclaimed before the run says no worker took it."""


async def _notice_no_worker(task: CeleryTask, view: View, queue: str) -> None:
    await asyncio.sleep(NO_WORKER_NOTICE.total_seconds())
    if task.state is TaskState.STARTING and not task.queued:
        view.note(
            f"No worker has taken the task after {NO_WORKER_NOTICE.total_seconds():g} s: it "
            f"waits on queue {queue!r}. Start one serving it (ahp-celery worker --queues "
            f"{queue}) with the same AHP_REDIS_URL; Ctrl-C cancels the task."
        )


async def run_task(harness: CeleryHarness, request: RunRequest, view: View) -> ExitCode:
    """Start the task, follow it to its outcome, close the harness; the exit code."""
    ctrl_c = _CtrlC(view)
    task: AgentTask | None = None
    watch: asyncio.Future[None] | None = None
    try:
        try:
            session = await _open_session(harness, request)
            view.session(session, created=request.session_id is None)
            policy = BusyPolicy.ENQUEUE if request.enqueue else BusyPolicy.REJECT
            task = await session.start_task(TaskRequest(TextInput(request.prompt)), if_busy=policy)
        except TaskStartUnconfirmedError as error:
            detail = f" (task {error.reference.request_id} may still run)"
            view.error(error, ExitCode.START_UNCONFIRMED, detail)
            return ExitCode.START_UNCONFIRMED
        except _REFUSALS as error:
            view.error(error, ExitCode.NOT_STARTED, "")
            return ExitCode.NOT_STARTED
        events = task.events()  # subscribed before any event can arrive
        view.task(task)
        queue = queue_of(harness.profile, harness.settings)
        watch = asyncio.ensure_future(_notice_no_worker(task, view, queue))
        ctrl_c.follow(task)
        follower = _Follower(task, events, view, ctrl_c, request, isinstance(view, JsonView))
        outcome = await follower.follow()
        code = exit_code(outcome)
        view.outcome(outcome, code)
        return code
    except asyncio.CancelledError:
        if ctrl_c.presses < 2:
            raise
        running = f"; task {task.id.value} may still run" if task is not None else ""
        view.note(f"Stopped waiting{running}.")
        return ExitCode.INTERRUPTED
    finally:
        if watch is not None:
            watch.cancel()
        ctrl_c.close()
        await _close(harness, view)
        view.close()


def harness_for(settings: Settings, request: RunRequest) -> CeleryHarness:
    """The harness of the run (no I/O yet).

    Raises:
        ProfileError: the profile or the settings' registry cannot be resolved.
    """
    return CeleryHarness(
        settings, profile=request.profile, run_metadata=dict(request.metadata) or None
    )


def run(settings: Settings, request: RunRequest, *, json_lines: bool) -> ExitCode:
    """``run_task`` on a new event loop, shown live or as JSON lines.

    Raises:
        ProfileError: the profile or the settings' registry cannot be resolved.
    """
    harness = harness_for(settings, request)
    view: View = JsonView() if json_lines else LiveView()
    # The command is a caller process of the deployment: it traces as AHP_TRACING / OTEL_*
    # say (the task's trace then starts here), and exports what is left before it exits.
    configure_tracing(settings, "ahp-cli")
    try:
        return asyncio.run(run_task(harness, request, view))
    finally:
        flush_tracing()
