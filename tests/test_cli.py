"""The ``ahp-celery`` CLI demo end to end, and workers run as separate OS processes."""

from __future__ import annotations

import asyncio
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

import pytest
import redis
from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput, TextOutput
from typer.testing import CliRunner

from harness import CeleryHarness
from tooling.cli import app, redact
from tooling.demo import Approvals
from tooling.worker_process import (
    PROJECT_ROOT,
    WorkerProcess,
    WorkerProcessError,
    process_group_alive,
    settings_environment,
)
from wire.settings import Settings

from .support.boundary import ModelBoundary

pytestmark = pytest.mark.processes

FIRST = "What is the capital of France?"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def own_settings(settings: Settings) -> Settings:
    """The test deployment's settings with a queue and namespace no other worker serves."""
    suffix = uuid4().hex[:8]
    return settings.model_copy(update={"namespace": f"cli-{suffix}", "queue": f"ahp.cli.{suffix}"})


@pytest.fixture
def worker_process(own_settings: Settings) -> Iterator[WorkerProcess]:
    process = WorkerProcess(own_settings, concurrency=1, pool="prefork", loglevel="warning")
    yield process
    process.kill()
    process.log_path.unlink(missing_ok=True)


def _demo(redis_url: str, notes: Path, *options: str, stdin: int | None = None) -> str:
    """Run ``ahp-celery demo``; its output (it must exit 0)."""
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "tooling.cli", "demo", "--redis-url", redis_url,
         "--notes-dir", str(notes), *options],
        cwd=PROJECT_ROOT,
        env=env,
        stdin=subprocess.DEVNULL if stdin is None else stdin,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def _notes(directory: Path) -> list[str]:
    """The notes the worker's save_note wrote (read where the effect happened)."""
    path = directory / "notes.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def test_demo_runs_the_pipeline_with_its_approved_effect_and_the_second_task_sees_the_first(
    redis_url: str, tmp_path: Path
) -> None:
    output = _demo(redis_url, tmp_path)  # stdin is not a terminal: approved automatically
    words = " ".join(output.replace("│", " ").split())
    assert "scripted stand-in, not a real LLM" in words, output
    assert output.count("Outcome: Completed") == 2, output
    answers = [line for line in output.splitlines() if line.strip().startswith("output:")]
    assert len(answers) == 2, output
    assert "This is your first question." in answers[0]
    assert f"Before that you asked '{FIRST}'" in answers[1], output
    assert "The word_count tool says: 6 words." in answers[0], output
    # Each task: the pipeline's steps in order, each moved through the status tool.
    transitions = [
        line.split("pipeline ", 1)[1]
        for line in output.splitlines()
        if "pipeline step" in line and "requested" not in line
    ]
    steps = ["count -> in_progress", "count -> complete", "note -> in_progress", "note -> complete"]
    assert transitions == [f"step {step}" for step in steps] * 2, output
    assert output.count("ToolCallChanged  started word_count") == 2, output
    assert output.count("ToolCallChanged  completed word_count") == 2, output
    # The approval: requested, answered (no terminal: approved once, and said so), resolved.
    assert output.count("InteractionRequested approval") == 2, output
    assert output.count("Answered automatically (no terminal to ask)") == 2, output
    assert output.count('"decision": "approve_once"') == 2, output
    assert output.count("InteractionResolved answered") == 2, output
    # Its effect, exactly once per task: reported, and in the file the worker appended to.
    assert output.count("ToolCallChanged  started save_note") == 2, output
    assert output.count("EffectChanged    completed: saved as line 1 of") == 1, output
    assert output.count("EffectChanged    completed: saved as line 2 of") == 1, output
    assert _notes(tmp_path) == [FIRST, "And what did I ask you before?"]
    assert "Notes file" in output
    assert "2 line(s)" in output
    for event in ("TaskStarted", "MessageDelta", "MessageCompleted", "TaskCompleted"):
        assert output.count(event) == 2, (event, output)
    assert output.count("UsageChanged") == 14, output  # one per model call: 6 tool calls, 1 answer
    assert "session usage:  input=" in output


def test_demo_asks_for_approvals_at_the_terminal(redis_url: str, tmp_path: Path) -> None:
    controller, terminal = pty.openpty()
    try:
        # What the user types: an unknown answer (asked again), approve once, then decline.
        os.write(controller, b"maybe\nonce\ndecline\n")
        output = _demo(redis_url, tmp_path, stdin=terminal)
    finally:
        os.close(terminal)
        os.close(controller)
    assert output.count("Decision [once/decline/cancel]") == 3, output
    assert "choose one of: once, decline, cancel" in output
    assert "Answered automatically" not in output
    assert output.count("EffectChanged") == 1, output
    assert "ToolCallChanged  declined save_note: declined by the caller" in output
    assert "The save_note tool says: declined by the caller." in output
    assert output.count("Outcome: Completed") == 2, output
    assert _notes(tmp_path) == [FIRST]  # the approved note only


def test_demo_approval_flags_answer_without_asking() -> None:
    assert Approvals.choose(None, interactive=True) is Approvals.ASK
    assert Approvals.choose(None, interactive=False) is Approvals.APPROVE
    assert Approvals.choose(True, interactive=True) is Approvals.APPROVE
    assert Approvals.choose(False, interactive=True) is Approvals.DECLINE
    assert Approvals.choose(False, interactive=False) is Approvals.DECLINE


def test_settings_environment_round_trips_every_field(
    own_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    changed = own_settings.model_copy(
        update={
            "lease_ttl": timedelta(seconds=2.5),
            "broker_url": own_settings.redis_url,
            "visibility_timeout": timedelta(hours=3),
        }
    )
    env = settings_environment(changed)
    assert {f"AHP_{name.upper()}" for name in Settings.model_fields} <= env.keys()
    monkeypatch.setenv("REDIS_URL", "redis://elsewhere:1/0")
    monkeypatch.setenv("AHP_CHECKPOINT_URL", "redis://stale:1/0")
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    assert Settings() == changed


async def test_worker_process_serves_a_task_and_is_gone_after_stop(
    worker_process: WorkerProcess, sync_redis: redis.Redis
) -> None:
    boundary = ModelBoundary(sync_redis)
    worker_process.start(timedelta(seconds=60))
    pid = worker_process.pid
    assert pid is not None
    assert worker_process.running
    child_env = worker_process.environment()
    assert child_env["AHP_PROFILES"] == "tests.support.profiles:PROFILES"
    assert str(PROJECT_ROOT) in child_env["PYTHONPATH"].split(os.pathsep)
    # The child imported the test profile registry and runs the controlled model.
    async with CeleryHarness(worker_process.settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec(instructions="be brief"))
        task = await session.start_task(TaskRequest(TextInput("process marker-7")))
        async with asyncio.timeout(60):
            outcome = await task.await_outcome()
        assert isinstance(outcome, Completed), outcome
        assert outcome.output == TextOutput("native-result")
    assert any("process marker-7" in text for text in boundary.observed_text_values)
    boundary.settle()
    assert worker_process.stop(timedelta(seconds=30)) == 0, worker_process.log_tail()
    assert not worker_process.running
    assert worker_process.pid is None
    assert worker_process.returncode == 0
    assert _gone(pid)
    assert not process_group_alive(pid)  # no pool child outlived the main process
    assert worker_process.stop() is None  # idempotent


def test_worker_process_kill_destroys_the_whole_group(worker_process: WorkerProcess) -> None:
    worker_process.start(timedelta(seconds=60))
    pid = worker_process.pid
    assert pid is not None
    worker_process.kill()
    assert _gone(pid)
    assert not process_group_alive(pid)
    assert worker_process.returncode == -9


def test_worker_process_that_cannot_come_up_fails_with_its_log(own_settings: Settings) -> None:
    unreachable = own_settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    process = WorkerProcess(unreachable, concurrency=1, loglevel="warning")
    try:
        with pytest.raises(WorkerProcessError, match="did not answer a ping") as failure:
            process.start(timedelta(seconds=4))
        assert str(process.log_path) in str(failure.value)
        assert not process.running
    finally:
        process.kill()
        process.log_path.unlink(missing_ok=True)


def test_settings_command_redacts_passwords(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AHP_REDIS_URL", "redis://user:s3cret@redis.example:6380/2")
    result = CliRunner().invoke(app, ["settings"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "s3cret" not in result.output
    assert "redis://user:***@redis.example:6380/2" in result.output
    assert redact("redis://:pw@h/0") == "redis://:***@h/0"
    assert redact("redis://h:1/0") == "redis://h:1/0"


def test_settings_command_prints_plain_unwrapped_lines_when_not_on_a_terminal() -> None:
    """Piped (CliRunner is no terminal), even 40 columns wide: one line per setting."""
    result = CliRunner().invoke(app, ["settings"], env={"COLUMNS": "40"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("AHP_REDIS_URL=redis://") for line in lines), lines
    assert all("=" in line for line in lines), lines
    assert any(line.startswith("# effective_broker_url=") for line in lines), lines
