"""What a worker accepts from the broker: well-formed run messages of its deployment only.

Any client of the broker can put anything on a deployment's queue. Celery's consumer
builds a request from a task message without checking its shape, and an exception
there ends the worker (upstream celery#4308): a body of ``5``, ``null`` or ``{}``, a
``timelimit`` header that is a string... Late acknowledgement then hands the message to
the next worker, which dies too. :class:`GuardedConsumer` (the worker's
``worker_consumer``) looks at every message before Celery does: anything but a
protocol 2 ``ahp.run_task`` message of this deployment, with exactly the run keyword
arguments, is rejected without requeue (dropped), logged with a short description
(never the body) and counted in ``Keys.malformed_messages``, and recorded as a dead
letter (``wire.dead_letters``: its id, queue and cause, in the same step as the count).
Unknown task names (Celery's own built-in tasks included) and undecodable bodies are
dropped the same way.

One layer below, an item on the queue list that is not even a kombu message is dropped
and counted too, by the worker's transport (``workers.guarded_transport``).

It also keeps the worker up while the broker refuses writes: at ``maxmemory`` with
``noeviction`` kombu's bookkeeping of a delivery fails with ``OutOfMemoryError``, a
``ResponseError``. With ``broker_channel_error_retry`` (see ``wire.celery_config``) the
consumer restarts instead of exiting; :class:`GuardedConsumer` spaces those restarts
out (0.5 s, doubling up to 5 s). The message whose bookkeeping was refused is gone
from the queue; the sweeper publishes its task again once it has not been claimed
for a lease time (``Keys.starting``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import redis
from celery.worker.consumer import Consumer
from redis.commands.core import Script
from redis.exceptions import OutOfMemoryError, ResponseError

from wire import scripts
from wire.backoff import Retries
from wire.celery_config import RUN_TASK
from wire.dead_letters import malformed_call
from wire.keys import Keys, is_valid_id
from wire.messages import RunMessage
from wire.redis_options import pool_options
from wire.settings import Settings

log = logging.getLogger(__name__)

_KWARGS = RunMessage.KEYWORDS
_EMBED = frozenset({"callbacks", "errbacks", "chain", "chord"})
_TEXT_HEADERS = (
    "lang", "shadow", "root_id", "parent_id", "group", "argsrepr", "kwargsrepr", "origin",
)  # fmt: skip
_INT_HEADERS = ("retries", "group_index", "replaced_task_nesting")
_UNSCHEDULED_HEADERS = ("eta", "expires")
_MAX_TIME_LIMIT = 366 * 24 * 3600.0


def kind_of(value: object) -> str:
    """The JSON-ish name of ``value``'s type, for a description that never shows it."""
    return "null" if value is None else type(value).__name__


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _header_problem(headers: Mapping[str, Any]) -> str | None:
    task_id = headers.get("id")
    if not isinstance(task_id, str) or not is_valid_id(task_id):
        return f"header 'id' is not a task id ({kind_of(task_id)})"
    for name in _TEXT_HEADERS:
        if not isinstance(headers.get(name), str | None):
            return f"header {name!r} is {kind_of(headers[name])}, expected a string"
    for name in _INT_HEADERS:
        value = headers.get(name)
        if value is not None and (not _is_int(value) or value < 0):
            return f"header {name!r} is {kind_of(value)}, expected a non-negative integer"
    for name in _UNSCHEDULED_HEADERS:
        if headers.get(name) is not None:
            return f"header {name!r} is set; run messages are never scheduled"
    timelimit = headers.get("timelimit")
    if timelimit is not None:
        if not isinstance(timelimit, list | tuple) or len(timelimit) != 2:
            return f"header 'timelimit' is {kind_of(timelimit)}, expected [hard, soft]"
        for limit in timelimit:
            number = isinstance(limit, int | float) and not isinstance(limit, bool)
            if limit is not None and (not number or not 0 < limit < _MAX_TIME_LIMIT):
                return f"header 'timelimit' holds {kind_of(limit)}, expected seconds or null"
    if not isinstance(headers.get("ignore_result"), bool | None):
        return f"header 'ignore_result' is {kind_of(headers['ignore_result'])}"
    if not isinstance(headers.get("stamped_headers"), list | None):
        return f"header 'stamped_headers' is {kind_of(headers['stamped_headers'])}"
    if not isinstance(headers.get("stamps"), dict | None):
        return f"header 'stamps' is {kind_of(headers['stamps'])}"
    return None


def _body_problem(body: object, namespace: str, task_id: str) -> str | None:
    if not isinstance(body, list | tuple) or len(body) != 3:
        return f"body is {kind_of(body)}, expected [args, kwargs, embed]"
    args, kwargs, embed = body
    if not isinstance(args, list | tuple) or args:
        return "positional arguments given; a run takes keyword arguments only"
    if not isinstance(kwargs, dict):
        return f"keyword arguments are {kind_of(kwargs)}, expected an object"
    unexpected = set(kwargs) - _KWARGS
    if unexpected:
        return f"{len(unexpected)} unexpected keyword argument(s)"
    if kwargs.get("namespace") != namespace:
        return f"namespace is not this deployment's ({kind_of(kwargs.get('namespace'))})"
    if kwargs.get("task_id") != task_id:
        return "keyword argument 'task_id' differs from the message id"
    session_id = kwargs.get("session_id")
    if session_id is not None and (not isinstance(session_id, str) or not is_valid_id(session_id)):
        return f"keyword argument 'session_id' is not a session id ({kind_of(session_id)})"
    if embed is not None:
        if not isinstance(embed, dict) or set(embed) - _EMBED:
            return f"embedded options are {kind_of(embed)}, expected callbacks/errbacks/chain/chord"
        if any(value is not None for value in embed.values()):
            return "callbacks, errbacks, chains or chords given; runs take none"
    return None


def message_problem(message: Any, namespace: str) -> str | None:
    """Why ``message`` (a kombu message) is not a run message of ``namespace``, or ``None``.

    The description is short and never repeats the message's content."""
    headers = message.headers
    if not isinstance(headers, dict):
        return f"headers are {kind_of(headers)}, expected an object"
    name = headers.get("task")
    if name != RUN_TASK:
        if not isinstance(name, str):
            return f"header 'task' is {kind_of(name)}, expected {RUN_TASK!r}"
        return f"task name {name[:60]!r} is not carried by this queue"
    if not isinstance(message.properties, dict) or not isinstance(message.delivery_info, dict):
        return "message properties are not objects"
    problem = _header_problem(headers)
    if problem is not None:
        return problem
    if message.content_type != "application/json":
        return f"content type {str(message.content_type)[:60]!r} is not JSON"
    try:
        body = message.decode()
    except Exception as error:
        return f"undecodable body ({type(error).__name__})"
    return _body_problem(body, namespace, headers["id"])


class MessageIntake:
    """Drops messages that are not run messages of one deployment, and counts them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._keys = Keys(settings.namespace)
        self._client: redis.Redis | None = None
        self._record: Script | None = None
        self._lock = threading.Lock()

    def problem(self, message: Any) -> str | None:
        return message_problem(message, self.settings.namespace)

    def drop(self, message: Any, problem: str, errors: tuple[type[BaseException], ...]) -> None:
        """Reject ``message`` without requeue, log why, count it."""
        headers = message.headers if isinstance(message.headers, dict) else {}
        task_id = headers.get("id")
        label = task_id if isinstance(task_id, str) and is_valid_id(task_id) else "?"
        log.warning(
            "dropped a malformed message (id %s) from queue %s: %s",
            label,
            self.settings.queue,
            problem,
        )
        if not message.acknowledged:
            message.reject_log_error(log, errors, requeue=False)
        self.count(label if label != "?" else None, problem)

    def count(self, message_id: str | None = None, cause: str = "not a message") -> None:
        """Count one dropped message and record it as a dead letter, in one step (best
        effort: a Redis error is only logged). ``cause`` never holds the message's content."""
        try:
            with self._lock:
                if self._client is None:
                    self._client = redis.Redis.from_url(
                        self.settings.redis_url,
                        socket_timeout=2,
                        socket_connect_timeout=2,
                        **pool_options(),
                    )
                    self._record = self._client.register_script(scripts.DEAD_LETTER)
                record = self._record
            assert record is not None
            keys, args = malformed_call(
                self._keys, self.settings.task_retention, message_id, self.settings.queue, cause
            )
            record(keys=keys, args=args)
        except redis.RedisError as error:
            log.warning("could not count a dropped message: %s", error)


def _refusal_retries() -> Retries:
    """Pauses between consuming again after the broker refused: 0.5 s doubling to 5 s,
    from 0.5 s again after 30 s without a refusal."""
    return Retries(
        first=timedelta(seconds=0.5), cap=timedelta(seconds=5), reset_after=timedelta(seconds=30)
    )


class GuardedConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, with the deployment's message intake in front of its handler.

    The worker's app carries the intake as ``app.ahp_intake`` (see ``create_app``)."""

    _refusals: Retries | None = None

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Callable[[Any], None]:
        handle = super().create_task_handler(*args, **kwargs)
        intake: MessageIntake = self.app.ahp_intake
        recoverable: tuple[type[BaseException], ...] = tuple(self.connection_errors) + tuple(
            self.channel_errors
        )

        def on_task_received(message: Any) -> None:
            problem = intake.problem(message)
            if problem is None:
                try:
                    handle(message)
                    return
                except recoverable:
                    raise  # the consumer reconnects
                except Exception as error:
                    # Not expected after the checks above; never let it end the worker.
                    log.exception("the consumer failed on a message; dropping it")
                    problem = f"the consumer raised {type(error).__name__}"
            intake.drop(message, problem, recoverable)

        return on_task_received

    def on_connection_error_before_connected(self, exc: BaseException) -> None:
        super().on_connection_error_before_connected(exc)
        self._wait_if_refused(exc)

    def on_connection_error_after_connected(self, exc: BaseException) -> None:
        super().on_connection_error_after_connected(exc)
        self._wait_if_refused(exc)

    def _wait_if_refused(self, exc: BaseException) -> None:
        """A broker refusing a command (``OutOfMemoryError`` at ``maxmemory``, a
        ``WRONGTYPE`` queue key...) would make the consumer restart at once, over and
        over (five times a second): wait, longer each time, up to 5 s."""
        if not isinstance(exc, ResponseError):
            return
        if self._refusals is None:
            self._refusals = _refusal_retries()
        delay = self._refusals.next_pause()
        what = (
            "refuses writes (maxmemory reached)"
            if isinstance(exc, OutOfMemoryError)
            else ("refused a command")
        )
        log.warning("the broker %s: %s; consuming again in %.1f s", what, exc, delay)
        time.sleep(delay)


__all__: Sequence[str] = [
    "GuardedConsumer",
    "MessageIntake",
    "kind_of",
    "message_problem",
]
