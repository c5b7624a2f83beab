"""Approvals and questions answered at the terminal (``tooling.interactions``), on the AHP's
own interaction types; no profile asks yet, so they are built here."""

from __future__ import annotations

import pytest
import typer
from agent_harness_protocol import (
    AnswerResponse,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalResponse,
    ApprovalScopeId,
    EffectKind,
    InteractionId,
    QuestionRequest,
    SessionApprovalGrant,
)
from typer.testing import CliRunner

from tooling.interactions import answer_for, ask, describe, unattended

ONCE_OR_DECLINE = ApprovalRequest(
    InteractionId("approval-1"),
    None,
    "Run `rm -rf build/`?",
    EffectKind.COMMAND,
    {ApprovalDecision.APPROVE_ONCE, ApprovalDecision.DECLINE},
)
WITH_GRANT = ApprovalRequest(
    InteractionId("approval-2"),
    None,
    "Write to docs/?",
    EffectKind.FILE_CHANGE,
    set(ApprovalDecision),
    SessionApprovalGrant(ApprovalScopeId("docs"), "writes under docs/ for this session"),
)
CANCEL_ONLY = ApprovalRequest(
    InteractionId("approval-3"), None, "Proceed?", None, {ApprovalDecision.CANCEL}
)
CHOICE = QuestionRequest(InteractionId("question-1"), None, "Which branch?", ("main", "dev"))
FREE = QuestionRequest(InteractionId("question-2"), None, "Your name?")


def test_an_approval_accepts_only_the_decisions_it_offers() -> None:
    assert answer_for(ONCE_OR_DECLINE, "once") == ApprovalResponse(ApprovalDecision.APPROVE_ONCE)
    assert answer_for(ONCE_OR_DECLINE, " Decline ") == ApprovalResponse(ApprovalDecision.DECLINE)
    for refused in ("session", "cancel", "yes", ""):
        with pytest.raises(ValueError, match="choose one of: once, decline"):
            answer_for(ONCE_OR_DECLINE, refused)
    assert answer_for(WITH_GRANT, "session") == ApprovalResponse(
        ApprovalDecision.APPROVE_FOR_SESSION
    )
    assert any("writes under docs/ for this session" in line for line in describe(WITH_GRANT))


def test_a_question_takes_a_choice_by_number_or_text_and_free_text_only_if_allowed() -> None:
    assert answer_for(CHOICE, "2") == AnswerResponse("dev")
    assert answer_for(CHOICE, "main") == AnswerResponse("main")
    for refused in ("3", "0", "feature", ""):
        with pytest.raises(ValueError, match="choose 1-2"):
            answer_for(CHOICE, refused)
    assert answer_for(FREE, "Ada Lovelace") == AnswerResponse("Ada Lovelace")
    with pytest.raises(ValueError, match="an answer is required"):
        answer_for(FREE, "  ")
    assert describe(CHOICE)[1:] == ["  1. main", "  2. dev"]


def test_unattended_declines_approvals_and_leaves_questions_unanswered() -> None:
    assert unattended(ONCE_OR_DECLINE) == ApprovalResponse(ApprovalDecision.DECLINE)
    assert unattended(CANCEL_ONLY) == ApprovalResponse(ApprovalDecision.CANCEL)
    assert unattended(CHOICE) is None
    assert unattended(FREE) is None


def test_ask_prompts_until_the_answer_is_valid() -> None:
    with CliRunner().isolation(input="maybe\ndecline\n") as (out, _, _):
        assert ask(ONCE_OR_DECLINE) == ApprovalResponse(ApprovalDecision.DECLINE)
        shown = out.getvalue().decode()
    assert "Approval needed (command): Run `rm -rf build/`?" in shown
    assert "once, decline" in shown  # the refused "maybe" named the choices
    with CliRunner().isolation(input="7\n1\n") as (out, _, _):
        assert ask(CHOICE) == AnswerResponse("main")
        assert "choose 1-2" in out.getvalue().decode()


def test_ask_gives_up_when_stdin_ends() -> None:
    """``ahp-celery run`` takes ``typer.Abort`` as "nobody will answer" and cancels."""
    with CliRunner().isolation(input=""), pytest.raises(typer.Abort):
        ask(FREE)


def test_an_approval_names_its_effect_kind_only_when_it_says_something() -> None:
    other = ApprovalRequest(
        InteractionId("approval-4"),
        None,
        "Allow save_note to run?",
        EffectKind.OTHER,
        {ApprovalDecision.APPROVE_ONCE, ApprovalDecision.DECLINE},
    )
    assert describe(other)[0] == "Approval needed: Allow save_note to run?"
    assert describe(ONCE_OR_DECLINE)[0] == "Approval needed (command): Run `rm -rf build/`?"
