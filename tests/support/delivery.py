"""What a controlled delivery does next: the one vocabulary of the start and response seams."""

from __future__ import annotations

import socket
from dataclasses import dataclass
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


@dataclass
class DeliveryControl:
    """What a fixture tells its seam to do with the next delivery, and how many it saw:
    the part of the AHP ``StartControl`` and ``ResponseControl`` they share."""

    mode: DeliveryMode = DeliveryMode.ACCEPT
    reason: str = ""
    submissions: int = 0

    def accept(self) -> None:
        self.mode = DeliveryMode.ACCEPT

    def reject_before_delivery(self, message: str) -> None:
        self.mode, self.reason = DeliveryMode.REJECT, message

    def lose_acceptance_acknowledgement(self, accepted_by_runtime: bool) -> None:
        self.mode = (
            DeliveryMode.LOSE_AFTER_ACCEPTANCE
            if accepted_by_runtime
            else DeliveryMode.LOSE_BEFORE_ACCEPTANCE
        )

    def observed_submissions(self) -> int:
        return self.submissions
