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
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import IntEnum
from typing import Any, Protocol

import typer
from agent_harness_protocol import (
    AgentSession,
    AgentTask,
    Cancelled,
    Completed,
    EffectChanged,
    Failed,
    HarnessTransportError,
    IncompatibleRequirementError,
    InteractionRequest,
    InteractionRequested,
    InteractionResolved,
    InteractionResponse,
    InteractionResponseUnconfirmedError,
    MessageCompleted,
    MessageDelta,
    MessageId,
    MessageRole,
    ObservationGap,
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
    TerminalEvent,
    TextInput,
    TextOutput,
    ToolCallChanged,
    Warning,
)
from rich.status import Status

from harness import (
    BusyPolicy,
    CeleryHarness,
    CeleryHarnessError,
    CelerySession,
    CeleryTask,
    InteractionClosedError,
    SessionBusyError,
)
from wire.settings import Settings

from .console import console, err
from .interactions import ask, in_thread, unattended
from .render import outcome_detail, to_json, usage_text

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

_TEXT_LIMIT = 160
"""Tool arguments and results are shortened to this many characters on a line."""


class ExitCode(IntEnum):
    """The exit status of ``ahp-celery run``."""

    COMPLETED = 0
    """The task completed."""
    FAILED = 1
    """The task failed."""
    USAGE = 2
    """Bad options or settings (nothing was started)."""
    CANCELLED = 3
    """The task was cancelled."""
    UNRESOLVED = 4
    """The task ended unresolved: whether its work stopped is not known."""
    NOT_STARTED = 5
    """The harness refused or could not start the task (unknown, busy or blocked session,
    incompatible request, Redis unreachable); nothing runs."""
    START_UNCONFIRMED = 6
    """The start could not be confirmed: the task may still run (its id is printed)."""
    INTERRUPTED = 130
    """A second Ctrl-C: stopped waiting before the outcome (the task may still run)."""


def exit_code(outcome: TaskOutcome) -> ExitCode:
    if isinstance(outcome, Completed):
        return ExitCode.COMPLETED
    if isinstance(outcome, Failed):
        return ExitCode.FAILED
    if isinstance(outcome, Cancelled):
        return ExitCode.CANCELLED
    return ExitCode.UNRESOLVED


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


# -- views ------------------------------------------------------------------------------


class View(Protocol):
    """Where a run is shown: the live terminal or JSON lines."""

    def session(self, session: AgentSession, created: bool) -> None: ...
    def task(self, task: CeleryTask) -> None: ...
    def event(self, event: TaskEvent) -> None: ...
    def note(self, text: str) -> None: ...
    def outcome(self, outcome: TaskOutcome, code: ExitCode) -> None: ...
    def error(self, error: BaseException, code: ExitCode, detail: str) -> None: ...
    def close(self) -> None: ...


def _short(text: str | None) -> str:
    if text is None:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= _TEXT_LIMIT else flat[: _TEXT_LIMIT - 1] + "…"


class LiveView:
    """The terminal: spinner while nothing streams, text as it arrives, lines for work."""

    def __init__(self) -> None:
        self._status: Status | None = None
        self._line_open = False
        """Streamed text was printed without its line ending."""
        self._streamed: dict[MessageId, str] = {}
        """The text streamed so far of each message."""
        self._shown: set[str] = set()
        """Whole messages printed (a completed one, or one streamed to its end)."""
        self._answered = False
        """Answer text reached the terminal (the outcome need not repeat it)."""
        self._session: AgentSession | None = None

    # spinner
    def _spin(self, text: str) -> None:
        self._end_line()
        if self._status is None:
            self._status = console.status(text, spinner="dots")
            self._status.start()
        else:
            self._status.update(text)

    def _still(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _end_line(self) -> None:
        if self._line_open:
            console.print()
            self._line_open = False

    def _line(self, text: str, *, style: str | None = None) -> None:
        self._still()
        self._end_line()
        console.print(text, style=style, markup=False)

    # View
    def session(self, session: AgentSession, created: bool) -> None:
        self._session = session
        kind = "persistent session" if session.persistent_ref is not None else "session"
        verb = "created" if created else "continued"
        self._line(f"{kind} {session.id.value} {verb}", style="dim")

    def task(self, task: CeleryTask) -> None:
        self._line(f"task {task.id.value}", style="dim")
        if task.queued:
            self._spin("Queued behind the session's unsettled task")
        elif task.state is TaskState.STARTING:
            self._spin("Queued: waiting for a worker")

    def event(self, event: TaskEvent) -> None:
        if isinstance(event, MessageDelta):
            self._still()
            self._streamed[event.message_id] = self._streamed.get(event.message_id, "") + event.text
            style = None if event.role is MessageRole.ANSWER else "dim italic"
            console.print(event.text, end="", style=style, markup=False)
            self._line_open = True
            self._answered = self._answered or event.role is MessageRole.ANSWER
            return
        if isinstance(event, TerminalEvent):
            self._still()
            return
        if isinstance(event, InteractionRequested):
            self._still()
            self._end_line()
            return  # presented by the prompt
        if isinstance(event, MessageCompleted):
            if event.message_id not in self._streamed and event.text:
                style = None if event.role is MessageRole.ANSWER else "dim italic"
                self._line(event.text, style=style)
                self._answered = self._answered or event.role is MessageRole.ANSWER
            self._shown.add(event.text or self._streamed.get(event.message_id, ""))
        elif isinstance(event, ToolCallChanged):
            detail = _short(event.error or event.result or event.arguments)
            self._line(f"⚙ {event.name} [{event.status.value}] {detail}".rstrip(), style="cyan")
        elif isinstance(event, EffectChanged):
            what = _short(event.description or event.output)
            code = f" exit {event.exit_code}" if event.exit_code is not None else ""
            self._line(f"⚙ {event.kind.value} [{event.status.value}]{code} {what}".rstrip())
        elif isinstance(event, Warning):
            self._line(f"warning ({event.kind.value}): {event.message}", style="yellow")
        elif isinstance(event, ObservationGap):
            self._line(f"… {event.dropped_events} events were not observed", style="yellow")
        elif isinstance(event, InteractionResolved):
            resolution = type(event.resolution).__name__.lower()
            self._line(f"interaction {event.interaction_id.value} {resolution}", style="dim")
        # TaskStarted, UsageChanged and the rest show as the spinner, between streamed text.
        if not self._line_open or isinstance(event, MessageCompleted):
            self._spin("Working")

    def note(self, text: str) -> None:
        self._line(text, style="yellow")

    def outcome(self, outcome: TaskOutcome, code: ExitCode) -> None:
        self._still()
        self._end_line()
        kind = type(outcome).__name__
        style = "green" if isinstance(outcome, Completed) else "red"
        console.print(f"[bold {style}]{kind}[/] ({outcome_detail(outcome)})", markup=True)
        output = outcome.output
        if (
            isinstance(output, TextOutput)
            and output.text
            and not self._answered
            and output.text not in self._shown
        ):
            console.print(output.text, markup=False)
        if output is not None and not output.complete:
            console.print("  (the output is partial)", style="dim")
        console.print(f"  task usage:     {usage_text(outcome.usage)}", markup=False)
        console.print(f"  session usage:  {usage_text(outcome.session_usage)}", markup=False)
        console.print(f"  exit code {int(code)}", style="dim")

    def error(self, error: BaseException, code: ExitCode, detail: str) -> None:
        self._still()
        self._end_line()
        err.print(f"[bold red]error:[/] {type(error).__name__}: ", end="", markup=True)
        err.print(f"{error}{detail}", markup=False)

    def close(self) -> None:
        self._still()
        self._end_line()
        ref = self._session.persistent_ref if self._session is not None else None
        if ref is not None:
            console.print(
                f'Continue this session with: ahp-celery run --session-id {ref.id} "..."',
                style="dim",
                markup=False,
            )


class JsonView:
    """One JSON object per line on stdout, each with a ``kind``:

    - ``session``: ``session_id``, ``persistent``, ``created``;
    - ``task``: ``task_id``, ``session_id``, ``queued`` (behind the session's unsettled task);
    - ``event``: one per task event, its fields as ``render.to_json`` gives them (``type``
      is the event class: ``TaskStarted``, ``MessageDelta``, ``ToolCallChanged``, ...);
    - ``outcome`` (last): the outcome (``type`` ``Completed``/``Failed``/``Cancelled``/
      ``Unresolved``, ``output``, ``usage``, ``session_usage``, ...) and ``exit_code``;
    - ``error`` (last, instead of an outcome): ``error``, ``message``, ``exit_code``.

    Notes for people (and the prompts of interactions) go to stderr.
    """

    def __init__(self) -> None:
        self._reader_gone = False

    def _write(self, kind: str, data: Mapping[str, Any]) -> None:
        if self._reader_gone:
            return
        line = json.dumps({"kind": kind, **data}, ensure_ascii=False, separators=(",", ":"))
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader left (``| head -1``): the task is still followed to its outcome
            # and the session closed as usual; nothing more is written, not even at exit.
            self._reader_gone = True
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())

    def session(self, session: AgentSession, created: bool) -> None:
        persistent = session.persistent_ref is not None
        self._write(
            "session",
            {"session_id": session.id.value, "persistent": persistent, "created": created},
        )

    def task(self, task: CeleryTask) -> None:
        self._write(
            "task",
            {"task_id": task.id.value, "session_id": task.session_id.value, "queued": task.queued},
        )

    def event(self, event: TaskEvent) -> None:
        self._write("event", to_json(event))

    def note(self, text: str) -> None:
        err.print(text, markup=False)

    def outcome(self, outcome: TaskOutcome, code: ExitCode) -> None:
        self._write("outcome", {**to_json(outcome), "exit_code": int(code)})

    def error(self, error: BaseException, code: ExitCode, detail: str) -> None:
        message = f"{error}{detail}"
        self._write(
            "error", {"error": type(error).__name__, "message": message, "exit_code": int(code)}
        )

    def close(self) -> None:
        pass


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
            f"waits on queue {queue!r}. Start one (ahp-celery worker) with the same "
            "AHP_REDIS_URL and AHP_QUEUE; Ctrl-C cancels the task."
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
        watch = asyncio.ensure_future(_notice_no_worker(task, view, harness.settings.queue))
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
    return asyncio.run(run_task(harness, request, view))
