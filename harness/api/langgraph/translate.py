"""A task's stream entries as the LangGraph server's stream events.

One AHP task is one or more LangGraph runs: the first runs until the task's first
approval or question (LangGraph ends a run at an interrupt), each resume run from there to
the next. :class:`RunTranslation` reads the task's entries from the first, keeps the
thread's state (its ``messages``, as LangChain message dicts) and yields the events of
the entries after its run's start: ``values``, ``updates``, ``messages`` (the
``messages-tuple`` mode: ``[chunk, metadata]``), ``custom`` (AHP events LangGraph has no
name for). Each event has its own id, ``<entry id>`` or ``<entry id>.<n>`` for the
further events of one entry, so a client resumes after exactly the event it last saw.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage, ToolMessage

from wire.codec import loads
from wire.event_codec import INTERACTION_TAG, RELAYED_NAMES, SEMANTIC, TERMINAL_TAG
from wire.interactions import InteractionPayload

from ..models import PendingInteraction

MODES = ("values", "updates", "messages-tuple", "custom")
"""The stream modes served."""
REFUSED_MODES = ("messages", "events", "debug", "tasks", "checkpoints")
FIRST_ENTRY = "0-0"
_CUSTOM_TAGS = {"usage", "effect", "warning"}
_TOOL_DONE = {"completed", "failed", "declined", "cancelled"}


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event of a run's stream: its id, name and JSON-ready data."""

    id: str
    event: str
    data: Any


def human_message(text: str, message_id: str) -> dict[str, Any]:
    return HumanMessage(content=text, id=message_id).model_dump()


def ai_message(text: str, message_id: str | None) -> dict[str, Any]:
    """``AIMessage(content=text, id=message_id).model_dump()``, without building the
    model (one per message of every run read; ``tests/test_langgraph_translate.py``
    holds the two equal)."""
    return {
        "content": text,
        "additional_kwargs": {},
        "response_metadata": {},
        "type": "ai",
        "name": None,
        "id": message_id,
        "tool_calls": [],
        "invalid_tool_calls": [],
        "usage_metadata": None,
    }


def _event_names(modes: frozenset[str]) -> frozenset[str]:
    """The event names a stream in ``modes`` carries (``messages-tuple`` sends
    ``messages``)."""
    names = {"metadata"} | (modes & {"custom", "values", "updates"})
    if "messages-tuple" in modes:
        names.add("messages")
    return frozenset(names)


def interrupt_of(payload: InteractionPayload) -> dict[str, Any]:
    """A pending interaction as a LangGraph interrupt: ``{value, id}``, id = its AHP id."""
    value = PendingInteraction.of(payload.to_request()).model_dump(mode="json")
    return {"value": value, "id": payload.interaction_id}


@dataclass
class RunTranslation:
    """The events of one run of a task (after entry ``start``), in ``modes``."""

    run_id: str
    thread_id: str
    modes: frozenset[str]
    start: str
    """The entry after which this run's events begin (``0-0``: the task's first run)."""
    base: Sequence[dict[str, Any]]
    """The thread's messages before the task (its earlier tasks')."""
    input_text: str
    task_id: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    ended: bool = False
    """The run's segment is over: an interrupt block or the terminal entry was read."""
    terminal: bool = False
    _step: int = 0
    _live: bool = False
    _pausing: bool = False
    _last: tuple[str, int] = ("0-0", 0)
    _names: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.messages = [*self.base, human_message(self.input_text, f"{self.task_id}-input")]
        self._last = (self.start, -1)
        self._names = _event_names(self.modes)

    def _wants(self, name: str) -> bool:
        """Whether the entry being read makes a ``name`` event (before the run's start
        the entries only build the thread's state)."""
        return self._live and name in self._names

    def values(self) -> dict[str, Any]:
        values: dict[str, Any] = {"messages": list(self.messages)}
        if self.interrupts:
            values["__interrupt__"] = list(self.interrupts)
        return values

    def opening(self) -> list[StreamEvent]:
        """The events before the run's first entry: ``metadata``, then the state it
        starts from (``values``). Call it after feeding the entries up to ``start``."""
        self._live = True
        self.interrupts = []
        metadata = {"run_id": self.run_id, "thread_id": self.thread_id, "attempt": 1}
        events = [("metadata", metadata)]
        if "values" in self.modes:
            events.append(("values", self.values()))
        return self._numbered(self.start, events)

    def feed(self, entry_id: str, fields: dict[str, str]) -> list[StreamEvent]:
        """The events of one entry: none before the run's start or after its end."""
        if self.ended:
            return []
        tag = fields.get("t", "")
        if tag != INTERACTION_TAG:
            self._pausing = False
        if not self._live and after(entry_id, self.start):
            self._live = True
            self.interrupts = []
        events = list(self._translate(fields))
        if not self._live:
            return []
        return self._numbered(entry_id, events)

    def closing(self) -> list[StreamEvent]:
        """The last ``values`` of a run that ended at an interrupt block (with its
        ``__interrupt__``); call it when a read ended with :meth:`at_interrupt`."""
        self.ended = True
        if "values" not in self.modes:
            return []
        return [StreamEvent(self.next_id(), "values", self.values())]

    def next_id(self) -> str:
        """An id after every event so far (for the closing ``error`` and ``end``)."""
        entry_id, n = self._last
        self._last = (entry_id, n + 1)
        return f"{entry_id}.{n + 1}"

    def at_interrupt(self) -> bool:
        """Whether the entries read so far end this run at an interrupt block (a pause
        writes all of its interactions in one step: one read returns them together)."""
        return self._live and self._pausing and not self.ended

    def _numbered(self, entry_id: str, events: list[tuple[str, Any]]) -> list[StreamEvent]:
        kept = [event for event in events if event[0] in self._names]
        numbered = [
            StreamEvent(entry_id if n == 0 else f"{entry_id}.{n}", name, data)
            for n, (name, data) in enumerate(kept)
        ]
        if kept:
            self._last = (entry_id, len(kept) - 1)
        elif self._last[0] != entry_id:
            self._last = (entry_id, -1)
        return numbered

    def _translate(self, fields: dict[str, str]) -> Iterator[tuple[str, Any]]:
        kind, tag, payload = fields.get("k", ""), fields.get("t", ""), fields.get("d", "")
        if kind != SEMANTIC:
            return
        try:
            data = loads(payload) if payload else {}
        except ValueError:
            return
        if tag == "delta" and isinstance(data, dict):
            self._step += 1
            if not self._wants("messages"):
                return
            chunk = {
                "type": "AIMessageChunk",
                "content": data.get("text", ""),
                "id": data.get("message_id"),
                "additional_kwargs": {},
                "response_metadata": {},
                "name": None,
                "tool_calls": [],
                "invalid_tool_calls": [],
                "tool_call_chunks": [],
                "usage_metadata": None,
            }
            yield "messages", [chunk, self._metadata("agent")]
        elif tag == "message" and isinstance(data, dict):
            message = ai_message(data.get("text", ""), data.get("message_id"))
            self.messages.append(message)
            if self._wants("updates"):
                yield "updates", {"agent": {"messages": [message]}}
            if self._wants("values"):
                yield "values", self.values()
        elif tag == "tool" and isinstance(data, dict):
            yield from self._tool(data)
        elif tag == INTERACTION_TAG and isinstance(data, dict):
            interrupt = interrupt_of(InteractionPayload.from_json(data))
            if not self._pausing:
                self.interrupts = []
            self._pausing = True
            self.interrupts.append(interrupt)
            yield "updates", {"__interrupt__": [interrupt]}
        elif tag == TERMINAL_TAG:
            self.terminal = True
            self.ended = True
            self.interrupts = []
            if self._wants("values"):
                yield "values", self.values()
        elif tag in _CUSTOM_TAGS:
            yield (
                "custom",
                {"ahp_event": RELAYED_NAMES[tag], **(data if isinstance(data, dict) else {})},
            )

    def _tool(self, data: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        work_id, name, status = data.get("work_id"), data.get("name"), data.get("status")
        if status == "started":
            try:
                args = loads(data.get("arguments") or "{}")
            except ValueError:
                args = {}
            call = {
                "name": name,
                "args": args if isinstance(args, dict) else {"input": args},
                "id": work_id,
                "type": "tool_call",
            }
            last = self.messages[-1] if self.messages else None
            if last is None or last.get("type") != "ai":
                last = ai_message("", f"{work_id}-call")
                self.messages.append(last)
            else:
                last = dict(last)
                self.messages[-1] = last
            last["tool_calls"] = [*last.get("tool_calls", []), call]
            yield "updates", {"agent": {"messages": [last]}}
        elif status in _TOOL_DONE:
            content = data.get("result") if status == "completed" else (data.get("error") or status)
            message = ToolMessage(
                content=str(content if content is not None else ""),
                tool_call_id=str(work_id),
                name=name,
                id=f"{work_id}-result",
                status="success" if status == "completed" else "error",
            ).model_dump()
            self.messages.append(message)
            if self._wants("updates"):
                yield "updates", {"tools": {"messages": [message]}}
            if self._wants("values"):
                yield "values", self.values()

    def _metadata(self, node: str) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "langgraph_node": node,
            "langgraph_step": self._step,
            "langgraph_checkpoint_ns": "",
            "checkpoint_ns": "",
        }


def _entry_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def after(entry_id: str, other: str) -> bool:
    """Whether stream entry ``entry_id`` comes after entry ``other``."""
    return _entry_key(entry_id) > _entry_key(other)


def event_position(event_id: str) -> tuple[int, int, int]:
    """An event id's place in its run's order: ``<entry id>`` or ``<entry id>.<n>``."""
    entry_id, _, n = event_id.partition(".")
    return (*_entry_key(entry_id), int(n or 0))


__all__ = [
    "FIRST_ENTRY",
    "MODES",
    "REFUSED_MODES",
    "RunTranslation",
    "StreamEvent",
    "after",
    "ai_message",
    "event_position",
    "human_message",
    "interrupt_of",
]
