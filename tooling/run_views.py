"""How ``ahp-celery run`` shows a run: live on a terminal, or as JSON lines.

:class:`LiveView` prints the answer as it streams, tool calls, effects, approvals and the
outcome on a terminal (a spinner while nothing arrives); :class:`JsonView` writes one JSON
object per line for programs. :class:`ExitCode` is what the run's outcome means to the
shell.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping
from enum import IntEnum
from typing import Any, Protocol

from agent_harness_protocol import (
    AgentSession,
    Cancelled,
    Completed,
    EffectChanged,
    Failed,
    InteractionRequested,
    InteractionResolved,
    MessageCompleted,
    MessageDelta,
    MessageId,
    MessageRole,
    ObservationGap,
    TaskEvent,
    TaskOutcome,
    TaskState,
    TerminalEvent,
    TextOutput,
    ToolCallChanged,
    Warning,
)
from rich.status import Status

from harness import (
    CeleryTask,
)

from .console import console, err
from .render import outcome_detail, to_json, usage_text

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


__all__ = ["ExitCode", "JsonView", "LiveView", "View", "exit_code"]
