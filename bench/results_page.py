"""The one results page the benchmarks write (``docs/benchmarks.md``).

Each benchmark owns one section, ``## bench/<name>.py``, headed by the date, the commit
(``-dirty``: uncommitted changes in the tree), the machine and the exact command of its
last run, with the run's report as printed; a run replaces only its own section.
Descriptions of the benchmarks sit above the first section (headed ``###``, which no
section pattern matches).
"""

from __future__ import annotations

import contextlib
import io
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from datetime import date
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parents[1]
RESULTS_PAGE = ROOT / "docs" / "benchmarks.md"

PAGE_HEADER = """# Benchmark results

Each benchmark that writes here owns one section, headed by the date, the commit
(`-dirty`: uncommitted changes in the tree) and the exact command of its last run; a run
replaces only its own section.
"""


def section_title(script: str) -> str:
    """The heading of ``bench/<script>``'s section."""
    return f"## bench/{script}"


def git_state() -> str:
    """The short commit of the tree, ``-dirty`` when it has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def machine() -> str:
    """The machine, as a reader compares runs: CPUs, Python, the load when it began."""
    load = os.getloadavg()
    return (
        f"{platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start"
    )


def write_section(page: Path, title: str, body: str) -> None:
    """Replace (or add) the section headed ``title`` in ``page`` with ``body``."""
    text = page.read_text() if page.is_file() else PAGE_HEADER
    pattern = re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    section = f"{title}\n\n{body.rstrip()}\n\n"
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text, count=1)
    else:
        text = text.rstrip() + "\n\n" + section
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text.rstrip() + "\n")


def section_body(commit: str, command: str, lines: Sequence[str], where: str = "") -> str:
    """A section's body: the date, commit, machine and command, then the report."""
    head = f"{date.today().isoformat()}, commit {commit}, `{command}`"
    if where:
        head += f"\n\n{where}"
    return head + "\n\n```\n" + "\n".join(lines).strip("\n") + "\n```"


class _Tee(io.TextIOBase):
    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.captured = io.StringIO()

    def write(self, text: str) -> int:
        self.captured.write(text)
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()


@contextlib.contextmanager
def printed_into_section(
    script: str, argv: Sequence[str], page: Path | None = RESULTS_PAGE
) -> Iterator[None]:
    """Everything printed inside goes to stdout as usual and, when the block ends without
    an exception, into ``bench/<script>``'s section of ``page`` (``None``: nowhere)."""
    commit, where = git_state(), machine()
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield
    if page is None:
        return
    command = f"python bench/{script}" + "".join(f" {arg}" for arg in argv)
    lines = tee.captured.getvalue().splitlines()
    write_section(page, section_title(script), section_body(commit, command, lines, where))
    print(f"results written to {page} ({section_title(script)})")


__all__ = [
    "RESULTS_PAGE",
    "git_state",
    "machine",
    "printed_into_section",
    "section_body",
    "section_title",
    "write_section",
]
