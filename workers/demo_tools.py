"""A harmless tool for the scripted demo agent: it reads its argument and changes nothing."""

from __future__ import annotations


def word_count(text: str) -> str:
    """Count the words of ``text`` (split on whitespace)."""
    return f"{len(text.split())} words"
