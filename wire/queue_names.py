"""What a broker queue name may be: the id rule of ``wire.keys`` (queue names name kombu's
Redis lists, and the task record's field is compared by the scripts, so one name is one
list). Apart from ``wire.queues`` so that ``wire.profiles`` can check a profile's queue
without importing the rule that reads profiles."""

from __future__ import annotations

from .errors import QueueNameError
from .keys import ID_RULE, is_valid_id

QUEUE_RULE = ID_RULE
"""What a queue name may be, in words (the id rule of ``wire.keys``)."""


def require_queue_name(value: str, *, what: str = "queue") -> str:
    """``value`` if it is a valid queue name, else :class:`QueueNameError` naming ``what``."""
    if not isinstance(value, str) or not is_valid_id(value):
        raise QueueNameError(f"invalid {what} name {value!r}: expected {QUEUE_RULE}")
    return value


def parse_queues(text: str, *, what: str = "queue") -> tuple[str, ...]:
    """The queue names of a comma-separated list (``"a,b"``), each validated, in order,
    without repeats; blanks around names are ignored. ``""`` is ``()``."""
    names = [name.strip() for name in text.split(",")] if text.strip() else []
    return tuple(dict.fromkeys(require_queue_name(name, what=what) for name in names))


__all__ = ["QUEUE_RULE", "parse_queues", "require_queue_name"]
