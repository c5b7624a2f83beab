"""``bench/blocking_tool.py`` on a tiny plan: a real worker process, a real blocking tool
and three runs beside it, each completed and each measured, its figures in order (the
block measured, the runs settled after the tool began)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import blocking_tool


@pytest.mark.processes
async def test_the_runs_beside_a_blocking_tool_complete_and_are_measured(
    redis_url: str, tmp_path: Path
) -> None:
    result = await blocking_tool.run(redis_url, 3, tmp_path)

    assert result.failures == []
    assert result.blocked_s > 0
    assert len(result.settled_s) == len(result.longest_gaps) == 3
    assert all(settled > 0 for settled in result.settled_s)
    assert 0 <= result.before_return <= 3
    lines = blocking_tool.report(result)
    assert any("runs settled before it returned:" in line for line in lines)
