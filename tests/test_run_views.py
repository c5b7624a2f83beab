"""How ``ahp-celery run`` shows a run on a terminal (``tooling.run_views.LiveView``): the
view fed events and an outcome by hand, its printed lines compared."""

from __future__ import annotations

import pytest
from agent_harness_protocol import (
    AgentUsage,
    Completed,
    EffectChanged,
    EffectKind,
    MessageCompleted,
    MessageDelta,
    MessageId,
    MessageRole,
    ObservationGap,
    StopReason,
    TaskId,
    TaskStarted,
    TextOutput,
    ToolCallChanged,
    Warning,
    WarningKind,
    WorkId,
    WorkStatus,
)

from tooling.run import ExitCode, LiveView


def test_the_live_view_prints_work_as_lines_between_streamed_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Tool calls, effects, warnings and gaps (which no test profile produces yet) each get
    a line of their own; streamed text resumes after them; the outcome does not repeat
    streamed text but shows text that never streamed."""
    task, message = TaskId("t1"), MessageId("m1")
    view = LiveView()
    for event in (
        TaskStarted(task),
        MessageDelta(task, message, "Looking ", MessageRole.ANSWER),
        ToolCallChanged(task, WorkId("w1"), "search", WorkStatus.STARTED, '{"q": "capital"}'),
        ToolCallChanged(task, WorkId("w1"), "search", WorkStatus.FAILED, error="offline"),
        EffectChanged(
            task, WorkId("w2"), EffectKind.COMMAND, WorkStatus.COMPLETED, "ls", exit_code=0
        ),
        Warning(task, WarningKind.OTHER, "slow provider"),
        ObservationGap(task, 3),
        MessageDelta(task, message, "it up.", MessageRole.ANSWER),
        MessageCompleted(task, message, "Looking it up.", MessageRole.ANSWER),
        MessageCompleted(task, MessageId("m2"), "Never streamed.", MessageRole.COMMENTARY),
    ):
        view.event(event)
    usage = AgentUsage(input_tokens=7, output_tokens=3, total_tokens=10)
    view.outcome(
        Completed(task, StopReason.FINISHED, TextOutput("Looking it up."), usage),
        ExitCode.COMPLETED,
    )
    view.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "Looking ",
        '⚙ search [started] {"q": "capital"}',
        "⚙ search [failed] offline",
        "⚙ command [completed] exit 0 ls",
        "warning (other): slow provider",
        "… 3 events were not observed",
        "it up.",
        "Never streamed.",
        "Completed (stop reason: finished)",
        "  task usage:     input=7 output=3 total=10",
        "  session usage:  not reported",
        "  exit code 0",
    ]


def test_the_live_view_prints_an_answer_once_when_its_message_was_not_marked_the_answer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A pipeline's last message is completed as commentary (the model might be nudged
    again); the outcome's output is that same text: printed once, not twice."""
    task = TaskId("t1")
    view = LiveView()
    for event in (
        TaskStarted(task),
        MessageCompleted(task, MessageId("m1"), "The final answer.", MessageRole.COMMENTARY),
    ):
        view.event(event)
    view.outcome(
        Completed(task, StopReason.FINISHED, TextOutput("The final answer."), AgentUsage()),
        ExitCode.COMPLETED,
    )
    view.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines.count("The final answer.") == 1, lines
