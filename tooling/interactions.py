"""Answering a task's approvals and questions at the terminal.

Written against the AHP's interaction types only: an ``ApprovalRequest`` offers a set of
``ApprovalDecision`` s and is answered with an ``ApprovalResponse``; a ``QuestionRequest``
offers choices and/or free text and is answered with an ``AnswerResponse``.

``ask`` blocks on the terminal: run it off the event loop with ``in_thread``.
``unattended`` is the answer when nobody can be asked (``--no-interactive``, stdin not a
terminal): an approval is declined (or, if declining is not offered, cancelled); a
question has no safe answer, so it gets none and the caller cancels the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

import typer
from agent_harness_protocol import (
    AnswerResponse,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalResponse,
    EffectKind,
    InteractionRequest,
    InteractionResponse,
    QuestionRequest,
)

__all__ = [
    "DECISION_LABELS",
    "answer_for",
    "ask",
    "describe",
    "in_thread",
    "unattended",
]

T = TypeVar("T")

DECISION_LABELS: dict[ApprovalDecision, str] = {
    ApprovalDecision.APPROVE_ONCE: "once",
    ApprovalDecision.APPROVE_FOR_SESSION: "session",
    ApprovalDecision.DECLINE: "decline",
    ApprovalDecision.CANCEL: "cancel",
}
"""What the user types for each decision, in the order they are offered."""


def describe(request: InteractionRequest) -> list[str]:
    """The lines that present ``request`` before it is answered."""
    if isinstance(request, ApprovalRequest):
        # The kind says something only when it is a specific one (a command, a file change).
        kind = request.effect
        shown = kind is not None and kind is not EffectKind.OTHER
        effect = f" ({kind.value.replace('_', ' ')})" if kind is not None and shown else ""
        lines = [f"Approval needed{effect}: {request.prompt}"]
        if request.detail:
            lines.append(f"  {request.detail}")
        if request.session_grant is not None:
            grant = request.session_grant.description
            lines.append(f"  'session' approves this for the rest of the session: {grant}")
        return lines
    if isinstance(request, QuestionRequest):
        lines = [f"Question: {request.prompt}"]
        if request.detail:
            lines.append(f"  {request.detail}")
        lines += [f"  {index}. {choice}" for index, choice in enumerate(request.choices, 1)]
        return lines
    return [f"The task asks for {type(request).__name__}, which this CLI cannot answer."]


def _offered(request: ApprovalRequest) -> list[str]:
    return [
        label
        for decision, label in DECISION_LABELS.items()
        if decision in request.available_decisions
    ]


def answer_for(request: InteractionRequest, typed: str) -> InteractionResponse:
    """The response that ``typed`` (what the user entered) gives to ``request``.

    Raises:
        ValueError: ``typed`` is not an answer the request accepts.
    """
    text = typed.strip()
    if isinstance(request, ApprovalRequest):
        for decision, label in DECISION_LABELS.items():
            if text.lower() == label and decision in request.available_decisions:
                return ApprovalResponse(decision)
        raise ValueError(f"choose one of: {', '.join(_offered(request))}")
    if isinstance(request, QuestionRequest):
        if text.isdigit() and 1 <= int(text) <= len(request.choices):
            return AnswerResponse(request.choices[int(text) - 1])
        if text in request.choices:
            return AnswerResponse(text)
        if request.allows_free_form and text:
            return AnswerResponse(typed)
        if request.choices:
            raise ValueError(f"choose 1-{len(request.choices)} or one of the choices")
        raise ValueError("an answer is required")
    raise ValueError(f"{type(request).__name__} cannot be answered here")


def ask(request: InteractionRequest, *, err: bool = False) -> InteractionResponse | None:
    """Ask at the terminal until the answer is valid; ``None`` for a kind this CLI cannot
    answer. ``err``: prompt on stderr (stdout carries ``--json`` lines)."""
    for line in describe(request):
        typer.echo(line, err=err)
    if isinstance(request, ApprovalRequest):
        label = f"Decision [{'/'.join(_offered(request))}]"
    elif isinstance(request, QuestionRequest):
        label = "Answer"
    else:
        return None
    while True:
        typed = typer.prompt(label, err=err)
        try:
            return answer_for(request, typed)
        except ValueError as error:
            typer.echo(f"  {error}", err=err)


def unattended(request: InteractionRequest) -> InteractionResponse | None:
    """The answer given when nobody can be asked (see the module docstring)."""
    if isinstance(request, ApprovalRequest):
        for decision in (ApprovalDecision.DECLINE, ApprovalDecision.CANCEL):
            if decision in request.available_decisions:
                return ApprovalResponse(decision)
    return None


def in_thread(function: Callable[[], T]) -> asyncio.Future[T]:
    """Run a blocking terminal prompt in a daemon thread: the loop keeps serving, and an
    unanswered prompt never holds up the exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        try:
            result, error = function(), None
        except BaseException as caught:  # handed to the loop, which re-raises it
            result, error = None, caught
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name="ahp-prompt", daemon=True).start()
    return future
