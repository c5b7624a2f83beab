"""``bench/recovery.py`` on a tiny plan: one run of each scenario for real (real Redis, real
worker processes, real signals), each ending as its scenario says, with every interval
measured and in the order recovery takes (the claim before the settle, the settle before
the caller hears of it)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from bench import recovery


@pytest.mark.processes
async def test_each_recovery_scenario_ends_as_configured_and_is_timed(
    redis_url: str, tmp_path: Path
) -> None:
    plan = recovery.Plan(
        runs=1, lease_ttl=timedelta(seconds=2), sweep_interval=timedelta(seconds=0.25)
    )
    results, lines = await recovery.run(redis_url, plan, tmp_path)

    assert recovery.failures(results) == []
    assert [result.scenario.key for result in results] == ["a", "b", "c", "d"]
    for result in results:
        scenario = result.scenario
        assert result.outcomes == {scenario.expected.__name__: 1}
        assert len(result.settles) == len(result.at_caller) == 1
        assert 0 < result.settles[0] <= result.at_caller[0]
        if scenario.resumes:
            assert len(result.claims) == 1
            assert 0 < result.claims[0] < result.settles[0]
        else:
            assert result.claims == []
    assert any(line.startswith("(a) SIGKILL") for line in lines)
    assert sum("signal -> claim on the other worker" in line for line in lines) == 2
