"""``ahp-celery run``: one task through the Python harness, followed live, against the test
Redis and real workers; the model's replies are scripted at the model boundary. How the
run is shown on a terminal: ``tests/test_run_views.py``."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import redis
from agent_harness_protocol import (
    SessionSpec,
)
from typer.testing import CliRunner, Result

from harness import CeleryHarness
from tooling.cli import app
from tooling.run import ExitCode
from tooling.worker_process import PROJECT_ROOT, settings_environment
from wire.keys import Keys
from wire.settings import Settings

from .support.boundary import ModelBoundary
from .support.controlled_model import SCOPE


@pytest.fixture
def cli_env(settings: Settings) -> dict[str, str | None]:
    """The test deployment's settings as the CLI reads them (``None``: unset)."""
    return {**settings_environment(settings), "COLUMNS": "200", "NO_COLOR": "1"}


def _invoke(env: Mapping[str, str | None], *args: str) -> Result:
    return CliRunner().invoke(app, ["run", *args], env=dict(env))


def _scoped(boundary: ModelBoundary, profile: str) -> list[str]:
    """Options that run ``profile`` in sessions only ``boundary`` sees."""
    scope = boundary.run_metadata[SCOPE]
    return ["--profile", profile, "--metadata", f"{SCOPE}={scope}"]


def _lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_run_streams_the_answer_and_exits_zero_when_completed(
    cli_env: dict[str, str | None], boundary: ModelBoundary
) -> None:
    for text in ("Streamed ", "in three "):
        boundary.script_scope({"op": "delta", "text": text})
    boundary.script_scope({"op": "complete", "text": "parts"})
    result = _invoke(cli_env, *_scoped(boundary, "outcome"), "stream me, please")
    assert result.exit_code == ExitCode.COMPLETED, result.output
    assert "Streamed in three parts" in result.output
    assert "Completed (stop reason: finished)" in result.output
    assert "task usage:" in result.output
    assert "session usage:" in result.output
    assert any("stream me, please" in text for text in boundary.observed_text_values)


def test_run_json_prints_every_event_and_ends_with_the_outcome(
    cli_env: dict[str, str | None], boundary: ModelBoundary
) -> None:
    boundary.script_scope({"op": "delta", "text": "json "})
    boundary.script_scope({"op": "complete", "text": "answer"})
    result = _invoke(cli_env, *_scoped(boundary, "outcome"), "--json", "as json")
    assert result.exit_code == ExitCode.COMPLETED, result.output
    lines = _lines(result.stdout)
    kinds = [line["kind"] for line in lines]
    assert kinds[:2] == ["session", "task"], kinds
    assert set(kinds[2:-1]) == {"event"}, kinds
    assert kinds[-1] == "outcome"
    task_id = lines[1]["task_id"]
    events = lines[2:-1]
    assert {event["task_id"] for event in events} == {task_id}
    types = [event["type"] for event in events]
    assert types[0] == "TaskStarted"
    assert types[-1] == "TaskCompleted"
    assert "MessageDelta" in types
    streamed = "".join(event["text"] for event in events if event["type"] == "MessageDelta")
    outcome = lines[-1]
    assert outcome["type"] == "Completed"
    assert outcome["task_id"] == task_id
    assert outcome["exit_code"] == 0
    assert outcome["output"]["text"] == streamed == "json answer"
    assert lines[0]["session_id"] == lines[1]["session_id"]
    assert [call["task"] for call in boundary.calls()] == [task_id]


def test_run_exits_non_zero_when_the_task_fails(
    cli_env: dict[str, str | None], boundary: ModelBoundary
) -> None:
    boundary.script_scope({"op": "fail", "message": "the model broke down"})
    result = _invoke(cli_env, *_scoped(boundary, "outcome"), "fail me")
    assert result.exit_code == ExitCode.FAILED, result.output
    assert "Failed" in result.output
    assert "the model broke down" in result.output
    assert len(boundary.calls()) == 1


def test_run_refuses_an_unknown_session_and_writes_nothing(
    cli_env: dict[str, str | None],
    boundary: ModelBoundary,
    settings: Settings,
    sync_redis: redis.Redis,
) -> None:
    unknown = "0" * 32
    result = _invoke(cli_env, *_scoped(boundary, "confirmed"), "--session-id", unknown, "hi")
    assert result.exit_code == ExitCode.NOT_STARTED, result.output
    assert "UnknownSessionError" in result.output
    assert sync_redis.exists(Keys(settings.namespace).session(unknown)) == 0
    assert boundary.calls() == []


def test_run_never_continues_a_non_persistent_session_it_would_delete(
    cli_env: dict[str, str | None], boundary: ModelBoundary, settings: Settings
) -> None:
    async def create() -> str:
        async with CeleryHarness(settings, profile="confirmed") as harness:
            session = await harness.create_session(SessionSpec())
            session_id = session.id.value
            result = await asyncio.to_thread(
                _invoke, cli_env, "--profile", "confirmed", "--session-id", session_id, "hi"
            )
            assert result.exit_code == ExitCode.NOT_STARTED, result.output
            assert "not persistent" in result.output
            # Still open: the refused run did not release it.
            info = await harness.session_info(session_id)
            assert not info.closed
            assert info.active_task is None
            return session_id

    asyncio.run(create())
    assert boundary.calls() == []


def test_run_continues_a_persistent_session_with_its_context(
    cli_env: dict[str, str | None], boundary: ModelBoundary
) -> None:
    scoped = _scoped(boundary, "confirmed")
    first = _invoke(cli_env, *scoped, "--persistent", "--json", "remember marker-41")
    assert first.exit_code == ExitCode.COMPLETED, first.output
    session = _lines(first.stdout)[0]
    assert session["persistent"] is True
    second = _invoke(cli_env, *scoped, "--session-id", session["session_id"], "what now?")
    assert second.exit_code == ExitCode.COMPLETED, second.output
    assert f"session {session['session_id']} continued" in second.output
    contexts = boundary.observed_contexts
    assert len(contexts) == 2
    assert "remember marker-41" in contexts[1]
    assert "what now?" in contexts[1]


@pytest.fixture
def run_process(
    cli_env: dict[str, str | None],
) -> Iterator[list[subprocess.Popen[str]]]:
    """``ahp-celery run`` as OS processes (a real SIGINT), killed if a test leaves one."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def _spawn(
    started: list[subprocess.Popen[str]], env: Mapping[str, str | None], *args: str
) -> subprocess.Popen[str]:
    environment = {key: value for key, value in {**os.environ, **env}.items() if value is not None}
    process = subprocess.Popen(
        [sys.executable, "-m", "tooling.cli", "run", *args],
        cwd=PROJECT_ROOT,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started.append(process)
    return process


def _read_to_task_line(process: subprocess.Popen[str]) -> list[Any]:
    """The run's JSON lines up to its ``task`` line."""
    assert process.stdout is not None
    lines: list[Any] = []
    while not lines or lines[-1]["kind"] != "task":
        line = process.stdout.readline()
        assert line, f"the run ended early: {process.wait()} {process.stderr}"
        lines.append(json.loads(line))
    return lines


def _await_model_call(process: subprocess.Popen[str], boundary: ModelBoundary) -> list[Any]:
    """Read the run's JSON lines up to its ``task`` line, then wait until the model runs
    that task; the lines read."""
    lines = _read_to_task_line(process)
    asyncio.run(_wait_for_call(boundary, str(lines[-1]["task_id"])))
    return lines


async def _wait_for_call(boundary: ModelBoundary, task_id: str) -> None:
    async with asyncio.timeout(60):
        while not boundary.calls_for(task_id):  # noqa: ASYNC110 (read from Redis)
            await asyncio.sleep(0.01)


def test_ctrl_c_cancels_the_task_and_still_shows_the_outcome(
    cli_env: dict[str, str | None],
    boundary: ModelBoundary,
    run_process: list[subprocess.Popen[str]],
) -> None:
    boundary.hold()  # the model waits until cancelled
    process = _spawn(run_process, cli_env, *_scoped(boundary, "confirmed"), "--json", "wait")
    task_id = _await_model_call(process, boundary)[-1]["task_id"]
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == ExitCode.CANCELLED, (stdout, stderr)
    outcome = _lines(stdout)[-1]
    assert outcome["kind"] == "outcome", stdout
    assert outcome["type"] == "Cancelled"
    assert outcome["task_id"] == task_id
    assert outcome["exit_code"] == ExitCode.CANCELLED
    assert "Cancelling the task" in stderr
    assert boundary.was_cancelled(task_id)


def test_a_second_ctrl_c_stops_waiting_for_a_task_that_ignores_cancellation(
    cli_env: dict[str, str | None],
    boundary: ModelBoundary,
    run_process: list[subprocess.Popen[str]],
) -> None:
    boundary.hold()
    process = _spawn(run_process, cli_env, *_scoped(boundary, "ignoring"), "--json", "stay")
    task_id = _await_model_call(process, boundary)[-1]["task_id"]
    process.send_signal(signal.SIGINT)
    assert process.stderr is not None
    while True:
        line = process.stderr.readline()
        assert line, f"the run ended before the first press was taken: {process.wait()}"
        if "Cancelling the task" in line:
            break
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == ExitCode.INTERRUPTED, (stdout, stderr)
    assert all(line["kind"] != "outcome" for line in _lines(stdout)), stdout
    assert f"task {task_id} may still run" in stderr
    assert boundary.was_cancelled(task_id)  # the first press reached the model


def test_enqueue_waits_behind_the_running_task_and_a_plain_start_is_refused(
    cli_env: dict[str, str | None],
    boundary: ModelBoundary,
    run_process: list[subprocess.Popen[str]],
) -> None:
    boundary.hold()
    scoped = _scoped(boundary, "confirmed")
    first = _spawn(run_process, cli_env, *scoped, "--persistent", "--json", "first marker-7")
    session_id = _await_model_call(first, boundary)[0]["session_id"]
    busy = _invoke(cli_env, *scoped, "--session-id", session_id, "refused")
    assert busy.exit_code == ExitCode.NOT_STARTED, busy.output
    assert "SessionBusyError" in busy.output
    queued = _spawn(
        run_process, cli_env, *scoped, "--session-id", session_id, "--enqueue", "--json", "next"
    )
    assert queued.stdout is not None
    while (line := json.loads(queued.stdout.readline()))["kind"] != "task":
        pass
    assert line["queued"] is True
    assert line["session_id"] == session_id
    boundary.release()
    first_out, first_err = first.communicate(timeout=60)
    assert first.returncode == ExitCode.COMPLETED, (first_out, first_err)
    queued_out, queued_err = queued.communicate(timeout=60)
    assert queued.returncode == ExitCode.COMPLETED, (queued_out, queued_err)
    assert _lines(queued_out)[-1]["type"] == "Completed"
    contexts = boundary.observed_contexts
    assert len(contexts) == 2  # the refused start never reached the model
    assert "first marker-7" in contexts[1]
    assert "next" in contexts[1]


def test_run_asks_for_an_approval_at_the_prompt_and_resumes_with_the_answer(
    cli_env: dict[str, str | None], boundary: ModelBoundary
) -> None:
    result = CliRunner().invoke(
        app,
        ["run", *_scoped(boundary, "guarding"), "--interactive", "do the guarded thing"],
        env=dict(cli_env),
        input="maybe\nonce\n",
    )
    assert result.exit_code == ExitCode.COMPLETED, result.output
    assert "Approval needed" in result.output
    assert "Allow guarded_effect to run?" in result.output
    assert "choose one of: once, decline, cancel" in result.output  # "maybe" was refused
    assert "guarded-result" in result.output
    assert boundary.effect_count() == 1


def test_run_without_a_terminal_declines_an_approval(
    cli_env: dict[str, str | None], boundary: ModelBoundary
) -> None:
    result = _invoke(cli_env, *_scoped(boundary, "guarding"), "--no-interactive", "guarded")
    assert result.exit_code == ExitCode.COMPLETED, result.output
    assert "answered" in result.output
    assert "decline" in result.output
    assert boundary.effect_count() == 0


def test_run_asks_the_agents_question_at_the_prompt_and_the_model_reads_the_answer(
    cli_env: dict[str, str | None], boundary: ModelBoundary
) -> None:
    result = CliRunner().invoke(
        app,
        ["run", *_scoped(boundary, "questioning"), "--interactive", "pick a colour"],
        env=dict(cli_env),
        input="3\n2\n",
    )
    assert result.exit_code == ExitCode.COMPLETED, result.output
    assert "Question: Which colour?" in result.output
    assert "choose 1-2" in result.output  # "3" was refused
    (task_id,) = {call["task"] for call in boundary.calls()}
    assert "blue" in boundary.calls_for(str(task_id))[-1]["texts"]


def test_without_a_worker_run_says_so_and_ctrl_c_cancels_with_nothing_to_clean(
    cli_env: dict[str, str | None],
    settings: Settings,
    run_process: list[subprocess.Popen[str]],
) -> None:
    """No worker serves the queue: after a moment the run says which queue the task
    waits on; Ctrl-C then cancels it, and closing has nothing to clean up (the task never
    ran, so no checkpoint was written), with no error."""
    env = {**cli_env, "AHP_QUEUE": f"{settings.queue}.unserved"}
    process = _spawn(run_process, env, "--json", "nobody takes this")
    assert process.stderr is not None
    _read_to_task_line(process)
    readable, _, _ = select.select([process.stderr], [], [], 15)
    assert readable, "nothing said within 15 s that no worker took the task"
    notice = process.stderr.readline()
    assert "No worker has taken the task" in notice, notice
    assert f"{settings.queue}.unserved" in notice, notice
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == ExitCode.CANCELLED, (stdout, stderr)
    assert _lines(stdout)[-1]["type"] == "Cancelled", stdout
    assert "closing the harness" not in stderr, stderr
    assert "CheckpointCleanupError" not in stderr, stderr
