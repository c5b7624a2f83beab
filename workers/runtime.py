"""One long-lived event loop per worker process, with its Redis clients and saver.

Celery runs task functions synchronously (prefork children, or pool threads). Each
process owns one background thread running one asyncio loop; every Redis client, the
checkpointer and the compiled graphs are created inside that loop and never used from
another one. A task function hands its coroutine to the loop and blocks on the result,
which costs far less than an ``asyncio.run`` per task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import CancelledError, Future
from typing import Any, TypeVar
from uuid import uuid4

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from wire.codec import dumps, loads
from wire.keys import Keys
from wire.modules import missing_modules
from wire.profiles import AgentProfile, load_profiles
from wire.redis_options import pool_options
from wire.settings import Settings
from wire.store import RecordStore

from .checkpoints import FencedRedisSaver, LeaseRegistry
from .errors import RedisModulesMissingError, RuntimeStoppedError
from .graph import ModelCalls, ModelGraph
from .import_cache import fail_fast_if_missing
from .models import build_model
from .runner import GraphProvider, LiveRun, TaskRunner, ThreadDeleter
from .sweeper import LeaseSweeper

log = logging.getLogger(__name__)
T = TypeVar("T")

_REPLY_TTL_SECONDS = 120


def _pool(url: str, settings: Settings, *, decode: bool) -> BlockingConnectionPool:
    return BlockingConnectionPool.from_url(
        url,
        max_connections=settings.redis_max_connections,
        timeout=30,
        decode_responses=decode,
        health_check_interval=30,
        **pool_options(),  # reconnect connections a restarted Redis closed
    )


class _Graphs(GraphProvider):
    def __init__(self, saver: FencedRedisSaver) -> None:
        self._saver = saver
        self._graphs: dict[str, ModelGraph] = {}
        self.calls = ModelCalls()

    async def graph(self, profile: AgentProfile) -> ModelGraph:
        graph = self._graphs.get(profile.digest)
        if graph is None:
            graph = ModelGraph(build_model(profile.model), self._saver, self.calls)
            self._graphs[profile.digest] = graph
        return graph


class _Deleter(ThreadDeleter):
    def __init__(self, saver: FencedRedisSaver) -> None:
        self._saver = saver

    async def __call__(self, thread_id: str) -> None:
        await self._saver.adelete_thread(thread_id)


class _LoopState:
    """Everything that lives inside the worker loop."""

    def __init__(
        self,
        settings: Settings,
        profiles: Mapping[str, AgentProfile],
        republish: Callable[[str, str], None] | None,
    ) -> None:
        self.settings = settings
        self.keys = Keys(settings.namespace)
        self.redis = Redis(connection_pool=_pool(settings.redis_url, settings, decode=True))
        self.store = RecordStore(self.redis, self.keys)
        self.leases = LeaseRegistry(self.store)
        self.checkpoint_redis = Redis(
            connection_pool=_pool(settings.effective_checkpoint_url, settings, decode=False)
        )
        self.saver = FencedRedisSaver(redis_client=self.checkpoint_redis, leases=self.leases)
        self.runs: dict[str, LiveRun] = {}
        self.token = uuid4().hex
        self.deleter = _Deleter(self.saver)
        self.runner = TaskRunner(
            settings=settings,
            store=self.store,
            profiles=profiles,
            graphs=_Graphs(self.saver),
            leases=self.leases,
            runs=self.runs,
            token=self.token,
            delete_thread=self.deleter,
        )
        self.background: list[asyncio.Task[None]] = []
        self.sweeper: LeaseSweeper | None = None
        if republish is not None:
            publish = republish

            async def republish_off_loop(task_id: str, session_id: str) -> None:
                await asyncio.to_thread(publish, task_id, session_id)

            self.sweeper = LeaseSweeper(settings, self.store, republish_off_loop)

    async def open(self) -> None:
        missing = await missing_modules(
            self.checkpoint_redis, self.settings.effective_checkpoint_url
        )
        if missing is not None:
            raise RedisModulesMissingError(missing)
        await self.saver.asetup()
        if self.sweeper is not None:
            self.background.append(asyncio.create_task(self.sweeper.serve()))
        self.background.append(asyncio.create_task(self._listen_for_cancellations()))
        self.background.append(asyncio.create_task(self._serve_maintenance()))

    async def close(self) -> None:
        for task in self.background:
            task.cancel()
        for task in self.background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for client in (self.redis, self.checkpoint_redis):
            await client.aclose()
            await client.connection_pool.disconnect()

    async def _listen_for_cancellations(self) -> None:
        """Deliver cancellation requests to this process's runs the moment they are made.

        A lost connection (Redis restarting) is retried with backoff for as long as the
        process lives. Pub/sub does not replay what was published while this listener
        was away, so after reconnecting it reads the durable cancel flag of every live
        run once (the lease renewer reads it too, but only every third of the TTL)."""
        channel = self.keys.cancel_channel()
        outage = _Outage("cancellation listener")
        while True:
            _raise_if_cancelled()
            try:
                async with self.redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(channel)
                    if outage.recovered():
                        await self._recheck_cancellations()
                    while True:
                        _raise_if_cancelled()
                        message = await pubsub.get_message(timeout=2.0)
                        if message is None:
                            continue
                        run = self.runs.get(str(message["data"]))
                        if run is not None:
                            run.cancel_requested.set()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                await outage.back_off(error)

    async def _recheck_cancellations(self) -> None:
        for task_id, run in tuple(self.runs.items()):
            if await self.redis.hget(self.keys.task(task_id), "cancel") == "1":
                run.cancel_requested.set()

    async def _serve_maintenance(self) -> None:
        """Delete checkpoint threads of released sessions, outside the Celery slots.

        A lost connection is retried with backoff for as long as the process lives."""
        queue = self.keys.maintenance_queue()
        outage = _Outage("maintenance consumer")
        while True:
            _raise_if_cancelled()
            try:
                item = await self.redis.blpop([queue], timeout=2)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                await outage.back_off(error)
                continue
            outage.recovered()
            if item is not None:
                await self._answer_maintenance(item[1])

    async def _answer_maintenance(self, raw: str | bytes) -> None:
        """Carry out one request and push its reply. Both are idempotent, so both are
        tried again while Redis is unreachable, for at most ``_MAINTENANCE_RETRY_SECONDS``
        (a caller that stopped waiting meanwhile finds the work done later)."""
        try:
            request = loads(raw)
            key = self.keys.maintenance_reply(str(request["id"]))
        except Exception:
            log.exception("malformed maintenance request dropped: %.200r", raw)
            return
        outage = _Outage(f"maintenance request {request['id']}")
        while True:
            try:
                reply = await self._carry_out(request)
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.rpush(key, dumps(reply))
                    pipe.expire(key, _REPLY_TTL_SECONDS)
                    await pipe.execute()
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if outage.seconds() > _MAINTENANCE_RETRY_SECONDS:
                    log.error("maintenance request %s dropped: %s", request["id"], error)
                    return
                await outage.back_off(error)

    async def _carry_out(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The reply to one request; connection errors propagate (the work is retried)."""
        if request.get("op") != "delete_thread":
            return {"ok": False, "error": f"unknown operation {request.get('op')!r}"}
        try:
            await self.deleter(str(request["thread_id"]))
        except (RedisConnectionError, RedisTimeoutError):
            raise
        except Exception as error:
            return {"ok": False, "error": f"{type(error).__name__}: {error}"}
        return {"ok": True}


_MAINTENANCE_RETRY_SECONDS = 60.0
_BACKOFF_FIRST = 0.05
_BACKOFF_MAX = 1.0


def _raise_if_cancelled() -> None:
    """redis-py can finish a command whose task was cancelled and drop the
    ``CancelledError``; a loop that would go on forever honours the request here."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class _Outage:
    """Backoff and logging of one background consumer's Redis outages: a warning when
    one begins, a note when it ends, a traceback only for errors that are not about the
    connection."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._since: float | None = None
        self._delay = _BACKOFF_FIRST

    def seconds(self) -> float:
        """How long the current outage has lasted (0 if there is none)."""
        if self._since is None:
            return 0.0
        return asyncio.get_running_loop().time() - self._since

    def recovered(self) -> bool:
        """Note a success; whether it ended an outage."""
        if self._since is None:
            return False
        log.info("%s: Redis reachable again after %.1f s", self._what, self.seconds())
        self._since = None
        self._delay = _BACKOFF_FIRST
        return True

    async def back_off(self, error: BaseException) -> None:
        if self._since is None:
            self._since = asyncio.get_running_loop().time()
            if isinstance(error, RedisConnectionError | RedisTimeoutError):
                log.warning("%s: %s: %s; reconnecting", self._what, type(error).__name__, error)
            else:
                log.error("%s failed; retrying", self._what, exc_info=error)
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, _BACKOFF_MAX)


async def _cancel_runs() -> None:
    current = asyncio.current_task()
    runs = [task for task in asyncio.all_tasks() if task is not current]
    for task in runs:
        task.cancel()
    if runs:
        await asyncio.wait(runs, timeout=5)


class WorkerRuntime:
    """The per-process loop thread. Thread-safe; start it once per process."""

    def __init__(
        self,
        settings: Settings,
        profiles: Mapping[str, AgentProfile] | None = None,
        *,
        republish: Callable[[str, str], None] | None = None,
    ):
        """``republish(task_id, session_id)`` publishes a run message again (from a worker
        thread); without it this process does not sweep for lost tasks."""
        fail_fast_if_missing("langchain")
        self.settings = settings
        self._republish = republish
        self.profiles = profiles if profiles is not None else load_profiles(settings.profiles)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._state: _LoopState | None = None
        self._lock = threading.Lock()
        self._stopping = False

    @property
    def started(self) -> bool:
        return self._loop is not None

    def start(self) -> None:
        with self._lock:
            if self._loop is not None:
                return
            loop = asyncio.new_event_loop()
            ready: Future[None] = Future()
            thread = threading.Thread(
                target=self._serve, args=(loop, ready), name="ahp-worker-loop", daemon=True
            )
            thread.start()
            ready.result(timeout=60)
            self._loop, self._thread = loop, thread

    def _serve(self, loop: asyncio.AbstractEventLoop, ready: Future[None]) -> None:
        asyncio.set_event_loop(loop)

        async def open_state() -> None:
            state = _LoopState(self.settings, self.profiles, self._republish)
            await state.open()
            self._state = state

        try:
            loop.run_until_complete(open_state())
        except BaseException as error:
            ready.set_exception(error)
            loop.close()
            return
        ready.set_result(None)
        loop.run_forever()
        loop.close()

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the worker loop and block until it returns."""
        self.start()
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except CancelledError:
            if self._stopping:
                raise RuntimeStoppedError("the worker runtime stopped during the run") from None
            raise

    def run_task(self, task_id: str, session_id: str | None = None) -> None:
        self.start()
        assert self._state is not None
        self.call(self._state.runner.run(task_id, session_id))

    def stop(self) -> None:
        """Close the loop. Runs still in progress are cancelled; their task functions
        raise ``RuntimeStoppedError`` so the message is handed back, not acknowledged."""
        with self._lock:
            loop, thread, state = self._loop, self._thread, self._state
            if loop is None or thread is None:
                return
            self._stopping = True
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_cancel_runs(), loop).result(timeout=10)
            if state is not None:
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(state.close(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            self._loop = self._thread = self._state = None
