"""What a controlled delivery does next: the one vocabulary of the start and response seams."""

from __future__ import annotations

import socket
from enum import StrEnum


class DeliveryMode(StrEnum):
    ACCEPT = "accept"
    REJECT = "reject"
    """Refused before it reached Redis (a closed port): confirmed non-delivery."""
    LOSE_AFTER_ACCEPTANCE = "lose_after_acceptance"
    """Redis acted; the reply never came back."""
    LOSE_BEFORE_ACCEPTANCE = "lose_before_acceptance"
    """The connection broke before Redis acted; the caller cannot tell."""


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
