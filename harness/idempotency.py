"""An idempotency key and the fingerprint of the request it names.

A retried start returns the task its first attempt started only if it repeats that
request: the start script compares the fingerprint stored with the key
(``AHP_IDEMPOTENCY_RETENTION``) and refuses the key with another request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from wire.codec import dumps
from wire.keys import IDEMPOTENCY_KEY_RULE, is_valid_idempotency_key
from wire.store import BusyPolicy


def fingerprinted_key(
    key: str | None, task_input: Mapping[str, Any], if_busy: BusyPolicy
) -> tuple[str, str] | None:
    """The key and a fingerprint of the request it names (a retry must repeat it: its
    text, its output schema if any, and its busy policy); ``None`` without a key.

    Raises:
        ValueError: the key is empty, longer than 255 characters or not printable ASCII.
    """
    if key is None:
        return None
    if not is_valid_idempotency_key(key):
        raise ValueError(f"an idempotency key is {IDEMPOTENCY_KEY_RULE}")
    fingerprinted: dict[str, Any] = {"input": task_input["text"], "if_busy": if_busy.value}
    if "output_schema" in task_input:
        fingerprinted["output_schema"] = task_input["output_schema"]
    if "narrowing" in task_input:
        fingerprinted["narrowing"] = task_input["narrowing"]
    request = dumps(fingerprinted)
    return key, hashlib.sha256(request.encode()).hexdigest()[:32]


__all__ = ["fingerprinted_key"]
