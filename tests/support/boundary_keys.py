"""The controlled model's keys in Redis (``tests.support.controlled_model``), where the
model in the worker records what it received and the tests control and read it.

Keys (test-only, outside every deployment namespace), under ``ahp-test:boundary:``:
``calls`` list of JSON calls, recorded the moment the model's stream is first advanced
and stamped with the ``test_scope`` of the session's run metadata (so a boundary sees
only its own test's calls) and the names of the tools offered to it, ``held`` hold flag,
``in_flight`` set of calls in progress (``"<pid>:<call id>"``, so a call of a killed
worker is seen to be over), ``cancellations`` and ``overlaps`` counters, ``cancelled``
the task ids whose model call received a cancellation, ``running:<session id>`` the
calls in progress per session, ``script:<task id>`` scripted commands for one task
(``script:scope:<scope>`` for every task of one boundary, with the profile option
``script_by_scope``), ``cursor:<script key>`` how many of a script's commands the task's
model calls consumed so far (a task with tools calls its model several times, each call
goes on where the last one stopped), ``deaf:<scope>`` set while the calls of one
boundary disregard cancellation. An input containing ``AHP_KILL_WORKER`` makes the model
SIGKILL its own worker process.

The model keeps its bookkeeping in ``AHP_TEST_MODEL_REDIS_URL`` when set (else the
deployment's Redis), so a test can partition a worker's own Redis traffic (through a
proxy) without cutting what the model records.
"""

from __future__ import annotations

PREFIX = "ahp-test:boundary:"
CALLS = PREFIX + "calls"
HELD = PREFIX + "held"
IN_FLIGHT = PREFIX + "in_flight"
CANCELLATIONS = PREFIX + "cancellations"
ABORT = PREFIX + "abort"
OVERLAPS = PREFIX + "overlaps"
CANCELLED_TASKS = PREFIX + "cancelled"
SCOPE = "test_scope"
"""Run metadata key naming the boundary (test) a session belongs to."""

MODEL_REDIS_URL_ENV = "AHP_TEST_MODEL_REDIS_URL"
"""Where the model keeps its bookkeeping, if not in the deployment's Redis."""

KILL_MARKER = "AHP_KILL_WORKER"
"""An input containing this kills the worker process running the model (a poison task)."""


def running_key(session_id: str) -> str:
    return f"{PREFIX}running:{session_id}"


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("State:"):
                    return "Z" not in line.split(":", 1)[1]
    except OSError:
        return False
    return True


def live_members(members: set[str]) -> set[str]:
    """Calls (``"<pid>:<call id>"``) whose process still runs: a worker killed mid-call
    leaves its entry behind, but its call is over."""
    return {member for member in members if process_alive(int(member.split(":", 1)[0]))}


def script_key(task_id: str) -> str:
    return f"{PREFIX}script:{task_id}"


def scope_script_key(scope: str) -> str:
    return f"{PREFIX}script:scope:{scope}"


def deaf_key(scope: str) -> str:
    return f"{PREFIX}deaf:{scope}"


def cursor_key(script: str) -> str:
    return f"{PREFIX}cursor:{script}"


__all__ = [
    "ABORT",
    "CALLS",
    "CANCELLATIONS",
    "CANCELLED_TASKS",
    "HELD",
    "IN_FLIGHT",
    "KILL_MARKER",
    "MODEL_REDIS_URL_ENV",
    "OVERLAPS",
    "PREFIX",
    "SCOPE",
    "cursor_key",
    "deaf_key",
    "live_members",
    "process_alive",
    "running_key",
    "scope_script_key",
    "script_key",
]
