"""What the LangGraph routes do, over the harness: threads as sessions, runs as segments
of tasks, their streams from the tasks' event streams (``translate``)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any, cast

from agent_harness_protocol import (
    AnswerResponse,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalResponse,
    HarnessTransportError,
    InteractionRequest,
    InteractionResponse,
    SessionRequirements,
    SessionSpec,
    TaskRequest,
    TaskState,
    TextInput,
)
from redis.exceptions import RedisError

from harness.errors import InteractionClosedError, UnknownInteractionError, UnknownSessionError
from harness.info import TaskInfo
from harness.runs import start_run
from harness.session import CelerySession
from harness.stream_reader import StreamEntry
from harness.task import CeleryTask
from wire.codec import dumps
from wire.event_codec import INTERACTION_TAG
from wire.store import BusyPolicy

from ..models import PendingInteraction
from ..problems import Issue, ProblemError, ProblemType, Retry, invalid, too_large
from ..state import ApiState
from .bodies import RunCreate
from .records import LangGraphRecords, RunRecord, ThreadRecord, now_ms
from .status import RunStatus, error_of, task_status
from .translate import FIRST_ENTRY, RunTranslation, StreamEvent, after, event_position

log = logging.getLogger(__name__)

_IDLE = timedelta(seconds=1)
_PAGE = 500
Position = tuple[int, int, int]


def not_found(kind: str, ident: str) -> ProblemError:
    return ProblemError(ProblemType.NOT_FOUND, 404, f"{kind} {ident} not found")


def conflict(detail: str) -> ProblemError:
    return ProblemError(ProblemType.CONFLICT, 409, detail)


def interrupt_of_request(request: InteractionRequest) -> dict[str, Any]:
    value = PendingInteraction.of(request).model_dump(mode="json")
    return {"value": value, "id": request.interaction_id.value}


def encode(events: Sequence[StreamEvent]) -> bytes:
    parts = []
    for event in events:
        head = f"id: {event.id}\r\n" if event.id else ""
        parts.append(f"{head}event: {event.event}\r\ndata: {dumps(event.data)}\r\n\r\n")
    return "".join(parts).encode()


class LangGraphService:
    def __init__(self, api: ApiState) -> None:
        self.api = api
        self.records = LangGraphRecords(api.events_redis, api.keys, api.core.task_retention)

    # -- lookups ----------------------------------------------------------------------
    async def thread(self, tenant: str, thread_id: str) -> ThreadRecord:
        record = await self.records.thread(tenant, thread_id)
        if record is None:
            raise not_found("thread", thread_id)
        return record

    async def run(self, tenant: str, thread_id: str | None, run_id: str) -> RunRecord:
        record = await self.records.run(tenant, run_id)
        if record is None or (thread_id is not None and record.thread_id != thread_id):
            raise not_found("run", run_id)
        return record

    async def latest_task(self, tenant: str, session_id: str) -> TaskInfo | None:
        try:
            info = await self.api.harness.session_info(session_id, tenant=tenant)
        except UnknownSessionError:
            return None
        if info.active_task is None:
            return None
        return await self.api.harness.task_info(info.active_task, tenant=tenant)

    async def thread_task(self, tenant: str, thread: ThreadRecord) -> TaskInfo | None:
        """The thread's current task: the session's unsettled one, else its latest run's."""
        active = await self.latest_task(tenant, thread.session_id)
        if active is not None:
            return active
        ids = await self.records.run_ids(tenant, thread.thread_id)
        for run_id in reversed(ids):
            record = await self.records.run(tenant, run_id)
            if record is not None:
                return await self.task_info(tenant, record)
        return None

    async def task_info(self, tenant: str, run: RunRecord) -> TaskInfo:
        return await self.api.harness.task_info(run.task_id, tenant=tenant)

    # -- starting runs ----------------------------------------------------------------
    def assistant(self, assistant_id: str) -> None:
        if assistant_id != self.api.harness.profile.name:
            raise not_found("assistant", assistant_id)

    async def create_run(
        self, tenant: str, thread: ThreadRecord | None, body: RunCreate
    ) -> tuple[RunRecord, CeleryTask]:
        body.refuse_unsupported(stateless=thread is None)
        self.assistant(body.assistant_id)
        if body.command is not None:
            assert thread is not None
            return await self._resume(tenant, thread, body)
        text = body.input_text()
        self._admit(text)
        request = TaskRequest(TextInput(text))
        if thread is None:
            spec = SessionSpec(requirements=SessionRequirements())
            started = await start_run(
                self.api.harness,
                spec,
                request,
                tenant=tenant,
                keep=body.on_completion == "keep",
                limits=self.api.settings.limits_of(tenant),
            )
            task = started.task
            thread_id, base = started.session.id.value, ()
            if body.on_completion == "keep":
                self.api.handles.add_session(tenant, started.session)
                await self._keep_thread(tenant, thread_id, task.id.value)
        else:
            session = await self.api.handles.session(tenant, thread.session_id)
            task = await self._start_on_thread(
                tenant, session, request, body.multitask_strategy or "enqueue"
            )
            thread_id, base = thread.thread_id, None
            await self.records.touch_thread(tenant, thread)
        self.api.handles.add_task(tenant, task)
        record = RunRecord(
            run_id=str(uuid.uuid4()),
            thread_id=thread_id,
            task_id=task.id.value,
            start=FIRST_ENTRY,
            assistant_id=body.assistant_id,
            metadata=body.metadata or {},
            multitask_strategy=body.multitask_strategy,
            stream_modes=tuple(sorted(body.modes())),
            input_text=text,
            base=base,
            # A kept run's session is a thread now: its run is announced under it.
            stateless=thread is None and body.on_completion != "keep",
            created_ms=now_ms(),
        )
        await self._save_started(tenant, record)
        return record, task

    async def _keep_thread(self, tenant: str, session_id: str, task_id: str) -> None:
        """The thread a stateless run kept on completion leaves (``on_completion: keep``):
        its session, readable and runnable as any thread."""
        try:
            token = await self.records.reserve_thread(tenant, session_id)
            created = now_ms()
            record = ThreadRecord(
                thread_id=session_id,
                session_id=session_id,
                metadata={},
                created_ms=created,
                updated_ms=created,
            )
            await self.records.create_thread(tenant, record, token)
        except RedisError:
            raise ProblemError(
                ProblemType.TRANSPORT_ERROR,
                503,
                f"the run's task {task_id} started, but its thread {session_id} could not be "
                f"written: do not repeat the request; GET /v1/tasks/{task_id} tells what the "
                "task did",
                task_id=task_id,
                retry=Retry.UNSAFE,
            ) from None

    async def _save_started(self, tenant: str, record: RunRecord) -> None:
        """Write the record of a run whose task started: if Redis refuses it, the task
        runs without a run to read it by, which the client must be told (never retry)."""
        try:
            await self.records.save_run(tenant, record)
        except RedisError:
            raise ProblemError(
                ProblemType.TRANSPORT_ERROR,
                503,
                f"the run's task {record.task_id} started, but its run record could not be "
                f"written: do not repeat the request; GET /v1/tasks/{record.task_id} tells "
                "what the task did",
                task_id=record.task_id,
                retry=Retry.UNSAFE,
            ) from None

    def _admit(self, text: str) -> None:
        size = len(text.encode("utf-8"))
        if size > self.api.settings.max_input_bytes:
            limit = self.api.settings.max_input_bytes
            raise too_large(f"an input of {size} bytes exceeds the limit of {limit}", "body.input")

    async def _start_on_thread(
        self, tenant: str, session: CelerySession, request: TaskRequest, strategy: str
    ) -> CeleryTask:
        if strategy == "interrupt":
            running = await self.latest_task(tenant, session.id.value)
            if running is not None and not running.state.is_terminal:
                handle = await self.api.handles.task(tenant, running.id)
                await handle.request_cancellation()
        policy = BusyPolicy.REJECT if strategy == "reject" else BusyPolicy.ENQUEUE
        return await session.start_task(
            request, if_busy=policy, limits=self.api.settings.limits_of(tenant)
        )

    async def _resume(
        self, tenant: str, thread: ThreadRecord, body: RunCreate
    ) -> tuple[RunRecord, CeleryTask]:
        assert body.command is not None
        info = await self.latest_task(tenant, thread.session_id)
        if (
            info is None
            or info.state is not TaskState.AWAITING_RESPONSE
            or not info.pending_interactions
        ):
            raise conflict(f"thread {thread.thread_id} has no pending interrupt to resume")
        answers = _answers(info.pending_interactions, body.command.resume)
        task = await self.api.handles.task(tenant, info.id)
        for request, value in answers:
            try:
                await task.respond(request.interaction_id, _response(request, value))
            except (InteractionClosedError, UnknownInteractionError) as error:
                raise conflict(
                    f"interrupt {request.interaction_id.value} was resumed already: {error}"
                ) from None
            except ValueError as error:
                raise invalid([Issue(path="body.command.resume", message=str(error))]) from None
        first = await self._first_run(tenant, thread.thread_id, info.id)
        record = RunRecord(
            run_id=str(uuid.uuid4()),
            thread_id=thread.thread_id,
            task_id=info.id,
            start=await self._last_interaction_entry(info.id),
            assistant_id=body.assistant_id,
            metadata=body.metadata or {},
            multitask_strategy=body.multitask_strategy,
            stream_modes=tuple(sorted(body.modes())),
            input_text="" if first is None else first.input_text,
            base=None if first is None else first.base,
            stateless=False,
            created_ms=now_ms(),
        )
        await self._save_started(tenant, record)
        await self.records.touch_thread(tenant, thread)
        return record, task

    async def _first_run(self, tenant: str, thread_id: str, task_id: str) -> RunRecord | None:
        """The first run of the thread's task ``task_id`` (the task's latest, so it is
        found within the walk's first pages)."""
        async for record in self.records.newest_first(tenant, thread_id):
            if record.task_id == task_id and record.start == FIRST_ENTRY:
                return record
        return None

    async def _last_interaction_entry(self, task_id: str) -> str:
        key = self.api.keys.events(task_id)
        entries = cast(list[StreamEntry], await self.api.events_redis.xrevrange(key, count=_PAGE))
        for entry_id, fields in entries:
            if fields.get("t") == INTERACTION_TAG:
                return entry_id
        return FIRST_ENTRY

    # -- values -----------------------------------------------------------------------
    async def _entries(self, task_id: str, start: str = "-") -> list[StreamEntry]:
        key = self.api.keys.events(task_id)
        found: list[StreamEntry] = []
        cursor = start
        while True:
            page = cast(
                list[StreamEntry], await self.api.events_redis.xrange(key, cursor, "+", count=_PAGE)
            )
            found.extend(page)
            if len(page) < _PAGE:
                return found
            cursor = f"({page[-1][0]}"

    async def base_of(self, tenant: str, run: RunRecord) -> tuple[dict[str, Any], ...]:
        """The thread's messages before the run's task: its earlier tasks' (cached on the
        run's record once every earlier task settled)."""
        base, _ = await self._base(tenant, run)
        return base

    async def _base(self, tenant: str, run: RunRecord) -> tuple[tuple[dict[str, Any], ...], bool]:
        """:meth:`base_of`, and whether every earlier task had settled (else the base
        holds their messages so far)."""
        if run.base is not None:
            return run.base, True
        first = (
            run
            if run.start == FIRST_ENTRY
            else await self._first_run(tenant, run.thread_id, run.task_id)
        )
        if first is not None and first is not run:
            return await self._base(tenant, first)
        # The earlier tasks' first runs, newest first, back to the latest whose own base
        # is known (each run records its base when first read): the replay reads one
        # task's stream, and the walk a few records, not the thread's every run.
        earlier: list[RunRecord] = []
        async for record in self.records.newest_first(
            tenant, run.thread_id, before=None if first is None else first.run_id
        ):
            if record.start != FIRST_ENTRY or record.task_id == run.task_id:
                continue
            earlier.insert(0, record)
            if record.base is not None:
                break
        carried: tuple[dict[str, Any], ...] = ()
        settled = True
        for record in earlier:
            if record.base is not None:
                carried = record.base
            translation = RunTranslation(
                record.run_id,
                record.thread_id,
                frozenset(),
                FIRST_ENTRY,
                carried,
                record.input_text,
                record.task_id,
            )
            translation.opening()
            for entry_id, fields in await self._entries(record.task_id):
                translation.feed(entry_id, fields)
            settled = settled and translation.terminal
            carried = tuple(translation.messages)
        if settled:
            await self.records.set_base(tenant, run, carried)
        return carried, settled

    async def _until_started(self, tenant: str, run: RunRecord) -> None:
        """Until the run's task wrote its first entry (or settled without one): a
        session's tasks run strictly in order, so every task before it has settled."""
        key = self.api.keys.events(run.task_id)
        stream = self.api.harness.stream_reader.follow(key, FIRST_ENTRY, idle=_IDLE)
        try:
            async for batch in stream:
                if batch or (await self.task_info(tenant, run)).state.is_terminal:
                    return
        finally:
            await stream.aclose()

    async def current_values(self, tenant: str, run: RunRecord) -> dict[str, Any]:
        """The thread's values as the task's entries read so far make them (no waiting)."""
        translation = RunTranslation(
            run.run_id,
            run.thread_id,
            frozenset(),
            FIRST_ENTRY,
            await self.base_of(tenant, run),
            run.input_text,
            run.task_id,
        )
        translation.opening()
        for entry_id, fields in await self._entries(run.task_id):
            translation.feed(entry_id, fields)
        return {"messages": translation.messages}

    async def segment_end(self, run: RunRecord) -> str | None:
        """``interrupt`` or ``terminal`` once the run's segment of the stream ended."""
        for _, fields in await self._entries(
            run.task_id, f"({run.start}" if run.start != FIRST_ENTRY else "-"
        ):
            tag = fields.get("t")
            if tag == INTERACTION_TAG:
                return "interrupt"
            if tag == "terminal":
                return "terminal"
        return None

    async def status(self, tenant: str, run: RunRecord) -> RunStatus:
        info = await self.task_info(tenant, run)
        end = None if info.outcome is not None else await self.segment_end(run)
        return task_status(info, ended_at_interrupt=end == "interrupt")

    # -- streams ----------------------------------------------------------------------
    async def events(
        self, tenant: str, run: RunRecord, modes: frozenset[str], after_event: Position | None
    ) -> AsyncIterator[list[StreamEvent]]:
        """The run's events after ``after_event`` (``None``: from its first), then
        ``error`` (if it failed) and ``end``: the run has ended (or paused) by then."""

        def fresh(events: list[StreamEvent]) -> list[StreamEvent]:
            if after_event is None:
                return events
            return [e for e in events if event_position(e.id) > after_event]

        base, settled = await self._base(tenant, run)
        opened: list[StreamEvent] = []
        if not settled and run.start == FIRST_ENTRY:
            # Queued behind tasks still running: the run's first values start from their
            # final messages. The metadata goes out at once; the rest once they settled.
            opened = RunTranslation(
                run.run_id, run.thread_id, frozenset(), run.start, base, "", run.task_id
            ).opening()
            yield fresh(opened)
            await self._until_started(tenant, run)
            base, _ = await self._base(tenant, run)
        translation = RunTranslation(
            run.run_id, run.thread_id, modes, run.start, base, run.input_text, run.task_id
        )
        last = FIRST_ENTRY
        if run.start != FIRST_ENTRY:
            for entry_id, fields in await self._entries(run.task_id, "-"):
                if after(entry_id, run.start):
                    break
                translation.feed(entry_id, fields)
            last = run.start

        yield fresh([e for e in translation.opening() if e not in opened])
        key = self.api.keys.events(run.task_id)
        stream = self.api.harness.stream_reader.follow(key, last, idle=_IDLE)
        try:
            async for batch in stream:
                entries: Sequence[StreamEntry] = batch
                if not entries:
                    info = await self.task_info(tenant, run)
                    if info.state.is_terminal:
                        reply = await self.api.events_redis.xread({key: last}, count=_PAGE)
                        if not reply:
                            break
                        entries = cast(list[tuple[str, list[StreamEntry]]], reply)[0][1]
                    elif info.state is TaskState.AWAITING_RESPONSE and info.pending_interactions:
                        translation.interrupts = [
                            interrupt_of_request(r) for r in info.pending_interactions
                        ]
                        yield fresh(translation.closing())
                        break
                    else:
                        continue
                chunk: list[StreamEvent] = []
                for entry_id, fields in entries:
                    if not after(entry_id, last):
                        continue
                    last = entry_id
                    chunk.extend(translation.feed(entry_id, fields))
                    if translation.ended:
                        break
                if translation.at_interrupt():
                    chunk.extend(translation.closing())
                yield fresh(chunk)
                if translation.ended:
                    break
        finally:
            await stream.aclose()
        info = await self.task_info(tenant, run)
        status = task_status(info, ended_at_interrupt=not translation.terminal)
        closing: list[StreamEvent] = []
        error = error_of(info.outcome)
        if error is not None:
            closing.extend(fresh([StreamEvent(translation.next_id(), "error", error)]))
        # Last; a client resuming after it gets nothing more (never an event again).
        end = {"run_id": run.run_id, "status": status.value}
        closing.extend(fresh([StreamEvent(translation.next_id(), "end", end)]))
        yield closing

    async def final_values(self, tenant: str, run: RunRecord) -> dict[str, Any]:
        """What ``runs.wait`` and ``join`` answer: the last values, ``__interrupt__`` at
        an interrupt, ``__error__`` for a run that failed."""
        values: dict[str, Any] = {}
        async for events in self.events(tenant, run, frozenset({"values"}), None):
            for event in events:
                if event.event == "values":
                    values = event.data
                elif event.event == "error":
                    return {"__error__": event.data}
        return values

    async def cancel_quietly(self, task: CeleryTask) -> None:
        try:
            await task.request_cancellation()
        except (HarnessTransportError, RedisError) as error:
            log.warning(
                "run of task %s: cancelling after a disconnect failed: %s", task.id.value, error
            )


def _answers(
    pending: Sequence[InteractionRequest], resume: Any
) -> list[tuple[InteractionRequest, Any]]:
    by_id = {request.interaction_id.value: request for request in pending}
    if isinstance(resume, dict) and resume and set(resume) <= set(by_id):
        return [(by_id[key], value) for key, value in resume.items()]
    if len(pending) == 1:
        return [(pending[0], resume)]
    raise invalid(
        [
            Issue(
                path="body.command.resume",
                message="several interrupts are pending: key resume by interrupt id ("
                + ", ".join(sorted(by_id))
                + ")",
            )
        ]
    )


def _response(request: InteractionRequest, value: Any) -> InteractionResponse:
    if isinstance(request, ApprovalRequest):
        decision = value.get("decision") if isinstance(value, dict) else value
        if not isinstance(decision, str):
            raise ValueError(
                "an approval is resumed with a decision: "
                + ", ".join(d.value for d in ApprovalDecision)
            )
        return ApprovalResponse(ApprovalDecision(decision))
    text = value.get("answer") if isinstance(value, dict) else value
    if not isinstance(text, str) or not text:
        raise ValueError("a question is resumed with its answer's text")
    return AnswerResponse(text)


async def shielded_cancel(service: LangGraphService, task: CeleryTask) -> None:
    await asyncio.shield(service.cancel_quietly(task))


__all__ = ["LangGraphService", "conflict", "encode", "interrupt_of_request", "not_found"]
