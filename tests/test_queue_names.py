"""The queue rule (``wire.queues``): which queue a profile's tasks run on, which queues a
deployment has, which a worker serves, and names refused where they are configured."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from tooling.worker_process import PROJECT_ROOT, child_environment
from wire.errors import QueueNameError
from wire.profiles import AgentProfile, ModelSpec, load_profiles
from wire.queues import deployment_queues, parse_queues, queue_of, served_queues
from wire.settings import Settings

from .support.deployments import own_deployment
from .support.profiles import SECOND_QUEUE

_MODEL = ModelSpec("tests.support.controlled_model:ControlledChatModel")


def test_a_profile_runs_on_its_queue_else_on_the_deployment_queue() -> None:
    settings = Settings(queue="ahp.main")
    assert queue_of(AgentProfile("plain", _MODEL), settings) == "ahp.main"
    assert queue_of(AgentProfile("bulk", _MODEL, queue="ahp.bulk"), settings) == "ahp.bulk"


def test_the_deployment_queues_are_the_default_first_then_each_profile_queue_once() -> None:
    settings = Settings(queue="ahp.main")
    registry = load_profiles("tests.support.profiles:PROFILES")
    assert deployment_queues(settings, registry) == ("ahp.main", SECOND_QUEUE)
    profiles = {
        "a": AgentProfile("a", _MODEL, queue="x"),
        "b": AgentProfile("b", _MODEL),
        "c": AgentProfile("c", _MODEL, queue="y"),
        "d": AgentProfile("d", _MODEL, queue="x"),
        "e": AgentProfile("e", _MODEL, queue="ahp.main"),
    }
    assert deployment_queues(settings, profiles) == ("ahp.main", "x", "y")
    assert deployment_queues(settings, {}) == ("ahp.main",)


def test_a_profile_queue_is_routing_not_behaviour() -> None:
    """Moving a profile to a queue keeps its digest: its sessions stay claimable."""
    plain = AgentProfile("same", _MODEL)
    assert AgentProfile("same", _MODEL, queue="elsewhere").digest == plain.digest


def test_a_worker_serves_its_configured_queues_else_the_deployment_queue() -> None:
    assert served_queues(Settings(queue="ahp.main")) == ("ahp.main",)
    assert served_queues(Settings(queue="ahp.main", worker_queues=" q2, q3 ,q2")) == ("q2", "q3")
    assert parse_queues("") == ()


@pytest.mark.parametrize("name", ["", "a b", "q2\n", "-q", "x" * 129, "q:2", "ü"])
def test_an_invalid_queue_name_is_refused_where_it_is_configured(name: str) -> None:
    with pytest.raises(QueueNameError, match="queue name"):
        AgentProfile("named", _MODEL, queue=name)
    with pytest.raises(ValidationError, match="queue"):
        Settings(queue=name)
    if name.strip() == name:  # blanks around a name in a list are ignored
        with pytest.raises(ValidationError, match="worker queue name"):
            Settings(worker_queues=f"ok,{name}")


def _worker_dry_run(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**child_environment(settings), **env}
    return subprocess.run(
        [sys.executable, "-m", "tooling.cli", "worker", "--dry-run", "--processes", "1", *args],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _queues_flag(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    (command,) = [line.split() for line in result.stdout.splitlines() if line.strip()]
    return command[command.index("-Q") + 1]


def test_the_worker_command_passes_its_queues_to_celery(redis_url: str) -> None:
    settings = own_deployment(redis_url, "queues-cli")
    assert _queues_flag(_worker_dry_run(settings)) == settings.queue
    assert _queues_flag(_worker_dry_run(settings, "--queues", "q2,q3")) == "q2,q3"
    assert _queues_flag(_worker_dry_run(settings, AHP_WORKER_QUEUES="q4")) == "q4"
    given = _worker_dry_run(settings, "--queues", "q5", AHP_WORKER_QUEUES="q4")
    assert _queues_flag(given) == "q5"
    refused = _worker_dry_run(settings, "--queues", "q2,bad name")
    assert refused.returncode == 2
    assert "invalid --queues name 'bad name'" in refused.stderr
    assert _worker_dry_run(settings, "--queues", " , ").returncode == 2
