"""Every Redis key and channel the project uses, in one place.

All keys of one deployment live under its namespace (``AHP_NAMESPACE``), so several
deployments can share one Redis. Ids are validated before they become part of a key.
The checkpoint thread of a session is owned by langgraph-checkpoint-redis (its own
``checkpoint:*``/``checkpoint_blob:*``/``checkpoint_write:*`` keys); its thread id is
:meth:`Keys.thread_id`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def is_valid_id(value: str) -> bool:
    """Whether ``value`` may be embedded in a key: 1-128 chars of ``[A-Za-z0-9_.-]``."""
    return bool(_ID.match(value))


def require_valid_id(kind: str, value: str) -> str:
    if not is_valid_id(value):
        raise ValueError(f"invalid {kind} id {value!r}: expected 1-128 characters [A-Za-z0-9_.-]")
    return value


@dataclass(frozen=True, slots=True)
class Keys:
    namespace: str

    def __post_init__(self) -> None:
        require_valid_id("namespace", self.namespace)

    # -- sessions -----------------------------------------------------------------------
    def session(self, session_id: str) -> str:
        """Hash: the session record (spec, profile, active task, closed flag, usage)."""
        return f"{self.namespace}:session:{session_id}"

    def lease(self, session_id: str) -> str:
        """String ``"<fence>:<token>"`` with a TTL: the graph run that may write the thread."""
        return f"{self.namespace}:session:{session_id}:lease"

    def fence(self, session_id: str) -> str:
        """Counter: the last fencing token issued for the session's lease (INCR)."""
        return f"{self.namespace}:session:{session_id}:fence"

    def handles(self, session_id: str) -> str:
        """Sorted set: open caller handles of a persistent session (member: handle id,
        score: expiry in ms). Callers refresh their handles; a dead caller's lapse."""
        return f"{self.namespace}:session:{session_id}:handles"

    def thread_id(self, session_id: str) -> str:
        """The LangGraph checkpoint ``thread_id`` of a session: the session id itself."""
        return session_id

    def checkpoint_latest(self, session_id: str) -> str:
        """String owned by langgraph-checkpoint-redis: the key of the thread's latest
        checkpoint (root namespace ``""`` is stored as ``__empty__``). Read only, to tell
        whether a persistent session's stored history is available."""
        return f"checkpoint_latest:{self.thread_id(session_id)}:__empty__"

    # -- tasks --------------------------------------------------------------------------
    def task_prefix(self) -> str:
        """Prefix of task hashes; scripts build ``<prefix><task id>`` for the active task."""
        return f"{self.namespace}:task:"

    def task(self, task_id: str) -> str:
        """Hash: the task record (session, state, input, cancel flag, fence, deliveries,
        claim time, recovery hold-off, last appended batch, the answer text streamed so far
        (``partial``, kept as the output of an outcome other than Completed), outcome)."""
        return f"{self.task_prefix()}{task_id}"

    def events(self, task_id: str) -> str:
        """Stream: the task's semantic events and provider diagnostics, in order."""
        return f"{self.namespace}:task:{task_id}:events"

    def running(self) -> str:
        """Sorted set: tasks a worker has claimed and not settled (member: task id,
        score: claim time in ms). The sweeper looks here for runs whose lease lapsed."""
        return f"{self.namespace}:running"

    def starting(self) -> str:
        """Sorted set: tasks started but not yet claimed (member: task id, score: start
        time in ms). The sweeper republishes one whose message vanished with a worker
        killed between taking it from the broker and claiming it."""
        return f"{self.namespace}:starting"

    @staticmethod
    def broker_queue_lists(queue: str) -> tuple[str, ...]:
        """Lists owned by kombu's Redis transport that hold a queue's waiting messages,
        one per priority step (0, 3, 6, 9): ``<queue>`` and ``<queue>\x06\x16<step>``."""
        return (queue, *(f"{queue}\x06\x16{step}" for step in (3, 6, 9)))

    # -- control ------------------------------------------------------------------------
    def cancel_channel(self) -> str:
        """Pub/sub channel: task ids whose cancellation was just requested (the durable
        request is the task hash's ``cancel`` field; this only makes it immediate)."""
        return f"{self.namespace}:cancel"

    def maintenance_queue(self) -> str:
        """List: JSON maintenance requests (delete a checkpoint thread) for any worker."""
        return f"{self.namespace}:maintenance"

    def maintenance_reply(self, request_id: str) -> str:
        """List: the one JSON reply to a maintenance request, with a short TTL."""
        return f"{self.namespace}:maintenance:reply:{request_id}"
