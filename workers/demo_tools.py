"""The demo agent's tools: one that changes nothing, one with a small, real effect.

``word_count`` reads its argument only. ``save_note`` appends one line to the notes file
``notes.txt`` in the directory named by the worker's environment variable
``AHP_DEMO_NOTES_DIR`` (``ahp-celery demo`` sets it for its worker; without it, a
directory ``ahp-demo-notes`` in the system's temporary directory). The profiles declare
``save_note`` approval-gated: it runs only once the caller approved the call.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

NOTES_DIR_VARIABLE = "AHP_DEMO_NOTES_DIR"
NOTES_FILE = "notes.txt"
NOTE_LIMIT = 500
"""Characters kept of a note (one line)."""


def word_count(text: str) -> str:
    """Count the words of ``text`` (split on whitespace)."""
    return f"{len(text.split())} words"


def notes_path() -> Path:
    """The notes file ``save_note`` appends to (see the module docstring)."""
    directory = os.environ.get(NOTES_DIR_VARIABLE) or os.path.join(
        tempfile.gettempdir(), "ahp-demo-notes"
    )
    return Path(directory) / NOTES_FILE


def save_note(text: str) -> str:
    """Append ``text`` as one line (whitespace collapsed, at most 500 characters) to the
    notes file; the result names the file and the line's number."""
    line = " ".join(text.split())[:NOTE_LIMIT]
    path = notes_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as notes:
        notes.write(line + "\n")
    with path.open(encoding="utf-8") as notes:
        count = sum(1 for _ in notes)
    return f"saved as line {count} of {path}"
