"""The benchmarks' one results page: each run replaces only its own section, with the
date, commit, machine, command and what it printed."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from bench.results_page import printed_into_section, section_title


def test_a_run_writes_what_it_printed_into_its_own_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmark results\n\n### about\n\nkept\n\n## bench/other.py\n\nother\n")
    with printed_into_section("demo.py", ["--quick"], page):
        print("first figures")
    with printed_into_section("demo.py", ["--quick"], page):
        print("second figures")
    text = page.read_text()
    assert text.count(section_title("demo.py")) == 1
    assert "second figures" in text
    assert "first figures" not in text
    assert "### about\n\nkept" in text
    assert "## bench/other.py\n\nother" in text
    assert f"{date.today().isoformat()}, commit " in text
    assert "`python bench/demo.py --quick`" in text
    assert "cpus, python" in text
    assert "second figures" in capsys.readouterr().out  # still printed as usual


def test_a_run_that_failed_leaves_the_page_as_it_was(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmark results\n")

    def failing_run() -> None:
        with printed_into_section("demo.py", [], page):
            print("half a report")
            raise RuntimeError("the run failed")

    with pytest.raises(RuntimeError):
        failing_run()
    assert page.read_text() == "# Benchmark results\n"
