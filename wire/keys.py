"""Every Redis key and channel the project uses, in one place, each with its owner and
lifetime.

All keys of one deployment live under its namespace (``AHP_NAMESPACE``), so several
deployments can share one Redis. Ids are validated before they become part of a key.

Every key below says its type, who writes it, who deletes it and when it expires. The rule
(design invariant 10): a released non-persistent session leaves nothing behind but the
records and event streams of its tasks, which expire ``AHP_TASK_RETENTION`` after they
settled; a persistent session keeps its record, fence and ``AHP_CHECKPOINTS_KEPT``
checkpoints (its retained context); the deployment's shared structures (running and
starting sets, maintenance lists) only hold entries of live work.

Keys this project does not own, for completeness:

- langgraph-checkpoint-redis, per checkpoint thread (thread id :meth:`Keys.thread_id`,
  root namespace stored as ``__empty__``): ``checkpoint:<thread>:<ns>:<id>`` (JSON, one
  checkpoint with the whole history inline), ``checkpoint_write:<thread>:<ns>:<id>:<task>:
  <idx>`` (JSON, pending writes of a checkpoint), ``write_keys_zset:<thread>:<ns>:<id>``
  (sorted set, the write keys of a checkpoint), ``checkpoint_latest:<thread>:<ns>`` (string,
  the latest checkpoint's key), and the search indexes ``checkpoint``/``checkpoint_write``.
  Written only by the run holding the session's lease. Pruned by that run after each turn
  to the latest ``AHP_CHECKPOINTS_KEPT`` checkpoints with their writes and registry sets
  (``workers.pruning``); all deleted when a non-persistent session is released (through the
  durable maintenance queue, and again by a run that outlived the release when it ends).
  No TTL.
- kombu (the broker, when it is this Redis): the queue lists
  (:meth:`Keys.broker_queue_lists`), ``unacked``/``unacked_index``/``unacked_mutex`` and
  ``_kombu.binding.*``; kombu owns their lifetimes (an acknowledged message leaves them).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"
"""What a session, task or tenant id may be: it is embedded in keys (the one declaration)."""
ID_RULE = "1-128 characters [A-Za-z0-9_.-]"
""":data:`ID_PATTERN` in words, for error messages and API descriptions."""
_ID = re.compile(ID_PATTERN)
IDEMPOTENCY_KEY_PATTERN = r"[\x21-\x7e]{1,255}"
"""What an idempotency key may be (it names a key through its digest, see
:meth:`Keys.idempotency`): the one declaration the harness and the API check against."""
IDEMPOTENCY_KEY_RULE = "1-255 printable ASCII characters"
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


def is_valid_idempotency_key(value: str) -> bool:
    """Whether ``value`` is an idempotency key (the whole string)."""
    return _IDEMPOTENCY_KEY.fullmatch(value) is not None


MODULES_PROBE_KEY = "ahp:modules-probe"
"""Never written, only read (``JSON.TYPE``) by the probe of ``wire.modules``; outside any
namespace because the probe is about the server, not a deployment."""


def is_valid_id(value: str) -> bool:
    """Whether ``value`` may be embedded in a key: 1-128 chars of ``[A-Za-z0-9_.-]``, the
    whole string (``fullmatch``: a trailing newline would name another key)."""
    return _ID.fullmatch(value) is not None


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
        """Hash: the session record (spec, profile, active task, closed flag, usage).

        Written by the caller (create, start, reopen) and the settling scripts (usage,
        active task). A non-persistent session's record is deleted when it is released
        (``release_session``: at once if no task of it is unsettled, else right after its
        task was stopped). A single-task session's record (and its lease, fence, handle,
        queue and grant keys) is deleted by the step that settles its task, whoever runs
        it. A persistent session's record is its retained context: it has no TTL and no
        deletion path (the AHP port has no "forget a persistent session" call)."""
        return f"{self.namespace}:session:{session_id}"

    def lease(self, session_id: str) -> str:
        """String ``"<fence>:<token>"``: the graph run that may write the thread.

        Set by the claim, renewed by its run, with a TTL of ``AHP_LEASE_TTL``; deleted when
        the run settles or ends, and by the release of a non-persistent session (a run still
        going then loses it, so its fenced writes are refused)."""
        return f"{self.namespace}:session:{session_id}:lease"

    def fence(self, session_id: str) -> str:
        """Counter: the last fencing token issued for the session's lease (INCR by the claim).

        Lives as long as the session record and is deleted with it, in the same script.
        Fences never repeat: a claim of a session whose record is gone settles the task
        without running it and issues no fence, so a counter restarting from 0 cannot
        happen for a session that can still run."""
        return f"{self.namespace}:session:{session_id}:fence"

    def handles(self, session_id: str) -> str:
        """Sorted set: open caller handles of a persistent session (member: handle id,
        score: expiry in ms).

        Written by callers (open, reopen, heartbeat every third of ``AHP_HANDLE_TTL``); a
        handle is removed when released, a dead caller's lapse and are dropped by the next
        reopen. Redis deletes the set when its last handle is released; release of a
        non-persistent session deletes it too."""
        return f"{self.namespace}:session:{session_id}:handles"

    def session_queue(self, session_id: str) -> str:
        """List: ids of the session's tasks queued behind its running one (the
        ``enqueue`` strategy), oldest first. Pushed by ``start_task.lua``; popped by the
        prelude's ``promote()`` when the session is free, an entry removed when its task
        settles while queued; deleted (its tasks settled Cancelled) by the release of a
        non-persistent session. Empty lists vanish. Scripts name it ``<session key>:queue``
        from the session key they are given, which must match this spelling."""
        return f"{self.session(session_id)}:queue"

    def idempotency(self, session_id: str, key: str) -> str:
        """String ``"<task id> <request fingerprint>"``: the task a client's
        ``Idempotency-Key`` started in this session. Set by ``start_task.lua`` with a TTL of
        ``AHP_IDEMPOTENCY_RETENTION``; deleted by the rollback of a start that never
        reached the broker. The client's key is hashed (any bytes, bounded length)."""
        digest = hashlib.sha256(key.encode()).hexdigest()[:32] if key else "none"
        return f"{self.session(session_id)}:idempotency:{digest}"

    def grants(self, session_id: str) -> str:
        """Set: the approval scopes (``wire.interactions.grant_scope``) the caller approved
        for the rest of the session (``APPROVE_FOR_SESSION``). Added by ``respond.lua``
        together with the response that grants it; read by the worker before it asks
        for an approval (a granted scope is not asked again). Only a tool whose profile
        declares a described ``session_grant`` is ever offered the decision. Deleted with
        the session record by ``release_session.lua`` (a persistent session keeps it, as it
        keeps its record). Scripts name it ``<session key>:grants``. No TTL."""
        return f"{self.session(session_id)}:grants"

    def thread_id(self, session_id: str) -> str:
        """The LangGraph checkpoint ``thread_id`` of a session: the session id itself (the
        Lua prelude relies on it when it queues a single-task session's thread deletion)."""
        return session_id

    def checkpoint_latest(self, session_id: str) -> str:
        """String owned by langgraph-checkpoint-redis: the key of the thread's latest
        checkpoint (root namespace ``""`` is stored as ``__empty__``). Workers write it (and
        the checkpoint documents, the pending writes) only through the fenced scripts
        ``checkpoint_put.lua`` / ``checkpoint_writes.lua``, checked against
        :meth:`lease` in the same step; callers read it, to tell whether a persistent
        session's stored history is available, and the pruner keeps this checkpoint and
        its parents."""
        return f"checkpoint_latest:{self.thread_id(session_id)}:__empty__"

    # -- tasks --------------------------------------------------------------------------
    def task_prefix(self) -> str:
        """Prefix of task hashes; scripts build ``<prefix><task id>`` for the active task."""
        return f"{self.namespace}:task:"

    def task(self, task_id: str) -> str:
        """Hash: the task record (session, state, input, whether its publish was confirmed
        (``published``: 0 pending, 1 confirmed, ``unconfirmed`` as the caller reported),
        cancel flag, fence, deliveries, claim time, recovery hold-off, whether a stopping
        worker handed it back, last appended batch, the answer text streamed so far
        (``partial``, kept as the output of an outcome other than Completed), outcome). A
        caller reads an unconfirmed start's fate here by its task id.

        Written by the caller's start and the scripts that claim, append and settle. Every
        settling path (``settle()`` in the Lua prelude: a worker's settle, a caller's cancel
        or cleanup, the claim's and the sweeper's loss handling, the release of its
        session) gives it a TTL of ``AHP_TASK_RETENTION``; a start surely never delivered is
        deleted by its rollback. An unsettled task has no TTL: it is in the running or the
        starting set, whose owners settle it."""
        return f"{self.task_prefix()}{task_id}"

    def events(self, task_id: str) -> str:
        """Stream: the task's semantic events and provider diagnostics, in order.

        Appended under the lease by the run, ended by the terminal entry of the settling
        script (which also carries the record's settled view, ``TerminalEntryField``), which
        gives it the same ``AHP_TASK_RETENTION`` TTL as the record; no entry
        is appended to a settled task."""
        return f"{self.namespace}:task:{task_id}:events"

    def interactions(self, task_id: str) -> str:
        """Hash: the interactions (approvals, questions) the task raised (field: interaction
        id, value: the interrupt's ``InteractionPayload`` JSON). Added by the worker's
        ``pause.lua`` under the lease; an interaction is pending while it has no entry in
        :meth:`responses`. Given the task's retention TTL by the settle helper of
        ``_prelude.lua``, with the record. Scripts name it ``<task key>:interactions``."""
        return f"{self.task(task_id)}:interactions"

    def responses(self, task_id: str) -> str:
        """Hash: how each interaction of the task was resolved, written once per
        interaction with ``HSETNX`` (field: interaction id, value: the resolution JSON of
        ``wire.interactions``: the caller's response, or cleared with a reason). Written by
        ``respond.lua`` (the caller's answer), ``cancel.lua`` and the settle helper (pending
        ones cleared); read by the worker that resumes the task. Expires with the record.
        Scripts name it ``<task key>:responses``."""
        return f"{self.task(task_id)}:responses"

    def tool_attempts(self, task_id: str) -> str:
        """Hash: how many attempts of each of the task's tool calls began (field: the tool
        call id, value: a count), counted by ``tool_attempt.lua`` under the run's lease the
        moment before the tool runs. A count above one means an earlier attempt's worker
        was lost mid-call (``ToolSpec.delivery`` says what happens then). Written by the
        worker; given the task's retention TTL by its first attempt and by the settle
        helper of ``_prelude.lua``. Scripts name it ``<task key>:tool_attempts``."""
        return f"{self.task(task_id)}:tool_attempts"

    def running(self) -> str:
        """Sorted set: tasks a worker has claimed and not settled (member: task id,
        score: claim time in ms). The sweeper looks here for runs whose lease lapsed.

        Shared by the deployment, no TTL. A member is added by the claim and removed by
        every settling path (and by the sweeper if its task is no longer running)."""
        return f"{self.namespace}:running"

    def starting(self) -> str:
        """Sorted set: tasks started but not yet claimed (member: task id, score: start
        time in ms). The sweeper republishes one whose message provably reached the broker
        and vanished unclaimed (a worker killed between taking it and claiming it).

        Shared by the deployment, no TTL. A member is added by the start and removed by
        the claim, every settling path and the rollback; the sweeper also drops members
        whose task is settled or gone and settles starts of released sessions, whichever
        Redis the broker is."""
        return f"{self.namespace}:starting"

    @staticmethod
    def broker_queue_lists(queue: str) -> tuple[str, ...]:
        """Lists owned by kombu's Redis transport that hold a queue's waiting messages,
        one per priority step (0, 3, 6, 9): ``<queue>`` and ``<queue>\x06\x16<step>``.
        Read (never written) by the sweeper; kombu owns their lifetime."""
        return (queue, *(f"{queue}\x06\x16{step}" for step in (3, 6, 9)))

    def shared(self) -> tuple[str, ...]:
        """The deployment-wide keys that have no TTL by design (each holds entries of live
        work only): running and starting sets, maintenance queue and consumer set."""
        return (
            self.running(),
            self.starting(),
            self.maintenance_queue(),
            self.maintenance_consumers(),
        )

    @staticmethod
    def broker_unacked() -> str:
        """Hash owned by kombu's Redis transport: every message a worker has taken from a
        queue and not yet acknowledged (field: delivery tag, value: the JSON message),
        kept until the ack or the visibility timeout. Read only, by the sweeper, as proof
        that a start's message reached the broker."""
        return "unacked"

    # -- statistics -----------------------------------------------------------------------
    def malformed_messages(self) -> str:
        """Counter (INCR), owned by the workers, no TTL (kept for the deployment's life;
        an operator may delete it): messages taken from the deployment's queue and
        dropped because they were not a well-formed run message of this deployment
        (malformed body or headers, unknown task name, undecodable body)."""
        return f"{self.namespace}:stats:malformed"

    def claim_counts(self) -> str:
        """Hash (HINCRBY), owned by the claim script (``claim.lua``), no TTL (kept for the
        deployment's life; an operator may delete it): how many run messages the claim
        ended with each result (field: a ``wire.store.ClaimResult`` value, ``claimed``
        for a run that started, ``busy``, ``terminal``, ``missing``, ... for a message
        dropped or settled without running), counted in the same step as the claim (a
        message naming no session whose task has no record is dropped by the worker's
        lookup before any claim, and counted ``missing`` by the worker). At
        most one field per result: it never grows with the work."""
        return f"{self.namespace}:stats:claims"

    def task_statistics(self) -> str:
        """Hash (HINCRBY), owned by the scripts that start, claim and settle tasks, no TTL
        (kept for the deployment's life; an operator may delete it): ``started``,
        ``settled:<state>`` per terminal state, and two histograms with fixed bounds,
        ``duration`` (start to settle) and ``wait`` (start to first claim), as
        ``<name>:<le>``, ``<name>:sum_ms`` and ``<name>:count`` fields. Scripts name it
        beside the running set (``<namespace>:stats:tasks``). A fixed number of fields:
        it never grows with the work. Read by ``RecordStore.task_statistics``."""
        return f"{self.namespace}:stats:tasks"

    def dead_letter_counts(self) -> str:
        """Hash (HINCRBY), owned by the steps that record dead letters (``claim.lua`` for
        ``max_deliveries``, ``dead_letter.lua`` for ``malformed``), no TTL (kept for the
        deployment's life; an operator may delete it): how many dead letters of each
        ``wire.dead_letters.DeadLetterKind`` were recorded, counted in the same step as
        the entry of :meth:`dead_letters`. One field per kind: it never grows with the
        work."""
        return f"{self.namespace}:stats:dead-letters"

    def statistics(self) -> tuple[str, ...]:
        """The deployment's counters: kept for its life by design, no TTL, a few fields
        each."""
        return (
            self.malformed_messages(),
            self.claim_counts(),
            self.task_statistics(),
            self.dead_letter_counts(),
        )

    # -- dead letters -------------------------------------------------------------------
    def dead_letters(self) -> str:
        """Stream: the deployment's dead letters (``wire.dead_letters``), oldest first, one
        entry (fields ``DeadLetterField``, id: when it was recorded) per task settled
        ``Failed`` after ``AHP_MAX_DELIVERIES`` lost deliveries and per malformed message
        a worker dropped (its id and cause only, never its content).

        Written only by the step that gives the work up (``claim.lua``,
        ``dead_letter.lua``), which trims it to the entries of the last
        ``AHP_TASK_RETENTION`` and at most ``wire.dead_letters.DEAD_LETTERS_KEPT`` and sets
        its TTL to the retention, so it expires one retention after its latest entry.
        Read by the API (``GET /v1/dead-letters``) and ``ahp-celery dead-letters``, which
        list only entries younger than the retention."""
        return f"{self.namespace}:dead-letters"

    # -- tenants ------------------------------------------------------------------------
    def tenant_prefix(self) -> str:
        """Prefix of the tenant keys below; scripts build ``<prefix><tenant>`` and the
        suffixed keys from a task record's tenant (docs/tenants.md)."""
        return f"{self.namespace}:tenant:"

    def tenant_limits(self, tenant: str) -> str:
        """Hash: the tenant's limits as the API that started its latest task set them
        (``running``, ``queued``; a field is absent when there is no such limit). Written
        by ``start_task.lua`` with every start that passes limits, with a TTL of the task
        retention renewed by each: the workers' settle and dispatch steps read the running
        limit from here (the API's settings are its source)."""
        return f"{self.tenant_prefix()}{tenant}"

    def tenant_admitted(self, tenant: str) -> str:
        """Set: the tenant's tasks past its running limit's gate (published, running,
        paused or resuming: started and not settled). Added to by the step that admits a
        task (``start_task.lua``, the prelude's ``promote()`` and ``dispatch_parked()``),
        removed from by the settle helper; no TTL, and empty (so absent) once every such
        task settled. The sweeper drops members that settled or expired meanwhile."""
        return f"{self.tenant_prefix()}{tenant}:admitted"

    def tenant_parked(self, tenant: str) -> str:
        """List: ids of the tenant's tasks waiting for its running limit, oldest first;
        they have no run message. Pushed by ``start_task.lua`` and ``promote()``; popped
        by ``dispatch_parked()`` (prelude) as admitted tasks settle, an entry removed when
        its task settles first (cancelled); absent when empty."""
        return f"{self.tenant_prefix()}{tenant}:parked"

    def tenant_rate(self, tenant: str) -> str:
        """Hash: the tenant's token bucket for starts per second (``tokens`` in
        thousandths, ``at`` in ms). Written only by a start that passes a rate, with a TTL
        of a minute past the time the bucket takes to fill (an absent bucket is full)."""
        return f"{self.tenant_prefix()}{tenant}:rate"

    def tenants_parked(self) -> str:
        """Set: tenants that parked a task (member: tenant name). Added to with each park,
        removed by the step that admits the tenant's last parked task; the sweeper
        admits what the settles did not (a limit raised, an admitted task that settled
        unseen) for the tenants listed here."""
        return f"{self.namespace}:tenants:parked"

    def dispatch_queue(self) -> str:
        """List: ids of parked tasks just admitted, whose run a worker publishes (the
        worker's dispatcher, ``workers.dispatcher``, pops them). Pushed by the step that
        admits them; a popped id whose publish was lost is published by the sweeper
        after the hold-off (the task is owed a publish in :meth:`starting`, score 0)."""
        return f"{self.namespace}:dispatch"

    # -- presence -----------------------------------------------------------------------
    def workers(self) -> str:
        """Sorted set: the worker processes that reported themselves (member: process
        name ``<node>/<pid>``, score: its last report in ms). Written every few seconds by
        each worker process's presence reporter (``workers.presence``), which removes its
        member when it stops; a reader (``wire.presence.live_workers``) drops members not
        seen for three report intervals (a process that was killed). No TTL: it holds
        live processes only."""
        return f"{self.namespace}:workers"

    def worker_presence(self, name: str) -> str:
        """String (JSON ``wire.presence.WorkerPresence``): what worker process ``name``
        serves and carries (queues, run slots, runs in flight). Written with its member of
        :meth:`workers` in one step, with a TTL of three report intervals (a killed
        process's entry lapses); deleted by the reporter when its process stops."""
        return f"{self.namespace}:worker:{name}"

    # -- control ------------------------------------------------------------------------
    def cancel_channel(self) -> str:
        """Pub/sub channel: task ids whose cancellation was just requested (the durable
        request is the task hash's ``cancel`` field; this only makes it immediate).
        A channel stores nothing."""
        return f"{self.namespace}:cancel"

    def maintenance_queue(self) -> str:
        """List: JSON maintenance requests (delete a checkpoint thread) for any worker.

        Pushed by callers, and by the settle step of a single-task session's task (the Lua
        prelude names it ``<namespace>:maintenance`` from the starting set's key
        ``<namespace>:starting``); a worker moves each request atomically into its processing list
        (:meth:`maintenance_processing`), so the request is never only in memory. Redis
        deletes the list when it is empty. No TTL (requests wait for a worker)."""
        return f"{self.namespace}:maintenance"

    def maintenance_processing(self, consumer: str) -> str:
        """List: the requests one worker's maintenance consumer took and has not answered.

        Filled by that consumer's ``BLMOVE``; an item is removed in the same transaction
        that pushes its reply. When the consumer's liveness key
        (:meth:`maintenance_consumer`) lapses, any other worker moves the items back onto the
        queue (the work is idempotent). Redis deletes the list when it is empty."""
        return f"{self.namespace}:maintenance:processing:{consumer}"

    def maintenance_consumer(self, consumer: str) -> str:
        """String with a TTL: one maintenance consumer is alive (refreshed by its heartbeat
        every third of the TTL; deleted when it stops). Expires with a dead worker."""
        return f"{self.namespace}:maintenance:consumer:{consumer}"

    def maintenance_consumers(self) -> str:
        """Set: consumers that may hold a processing list (member: consumer id).

        Shared by the deployment, no TTL. Each consumer adds itself with every heartbeat
        and removes itself when it stops; a dead consumer is removed by the worker that
        recovers its processing list."""
        return f"{self.namespace}:maintenance:consumers"

    def maintenance_reply(self, request_id: str) -> str:
        """List: the one JSON reply to a maintenance request.

        Pushed by the worker that carried the request out, with a TTL of two minutes set
        in the same transaction; popped by the caller waiting for it."""
        return f"{self.namespace}:maintenance:reply:{request_id}"

    # -- the LangGraph dialect (harness.api.langgraph) ----------------------------------
    def lg_thread(self, tenant: str, thread_id: str) -> str:
        """String (JSON): one LangGraph thread of a tenant: the session it is, its metadata
        and times.

        Written by the API: first as a reservation (``SET NX`` with a 30 s TTL, holding a
        token), then made permanent by the request that holds the token (a check-and-set
        under ``WATCH``), so a request paused past the reservation cannot overwrite a
        thread created meanwhile. Deleted by ``DELETE /threads/{id}`` with the session it
        names. No TTL once created (a thread lives until deleted, as its session does)."""
        return f"{self.namespace}:lg:thread:{tenant}:{thread_id}"

    def lg_threads(self, tenant: str) -> str:
        """Sorted set: a tenant's thread ids, scored by creation time (ms), for
        ``POST /threads/search``. Written with the thread record; a member is removed when
        its thread is deleted (Redis deletes the set when it is empty). No TTL."""
        return f"{self.namespace}:lg:threads:{tenant}"

    def lg_run(self, tenant: str, run_id: str) -> str:
        """String (JSON): one LangGraph run: the task it is a segment of, where in the
        task's event stream it starts, its thread, assistant, metadata and strategy.

        Written once by the API when the run is created; deleted with its thread. TTL
        ``max(AHP_TASK_RETENTION, 7 days)``, renewed whenever the run is read, so a run
        waiting for an approval stays readable while anyone asks about it."""
        return f"{self.namespace}:lg:run:{tenant}:{run_id}"

    def lg_thread_runs(self, tenant: str, thread_id: str) -> str:
        """Sorted set: the run ids of one thread, scored by creation time (ms), for
        ``GET /threads/{id}/runs``. Written with each run record; deleted with the thread.
        Its members may outlive their run records' TTL; listings skip those."""
        return f"{self.namespace}:lg:thread-runs:{tenant}:{thread_id}"
