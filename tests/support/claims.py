"""Proof that the claim consumed a run message, read from the deployment's claim counts.

A message gone from the broker's queue only shows that a worker took it, not that the
claim has looked at it yet. The claim script counts every result in
``Keys.claim_counts`` in the same step (``wire/lua/claim.lua``): a test that must show
that a copy was *not* run first waits here until the claim counted it, then asserts that
nothing else happened.
"""

from __future__ import annotations

import asyncio

import redis

from wire.keys import Keys
from wire.store import ClaimResult


def _read(client: redis.Redis, keys: Keys) -> dict[ClaimResult, int]:
    raw = client.hgetall(keys.claim_counts())
    counts = dict.fromkeys(ClaimResult, 0)
    for name, value in raw.items():  # type: ignore[union-attr]
        field = name.decode() if isinstance(name, bytes) else str(name)
        if field in {result.value for result in ClaimResult}:
            counts[ClaimResult(field)] = int(value)
    return counts


class ClaimCounts:
    """The claim counts of one deployment since this object was made."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self._client = client
        self._keys = Keys(namespace)
        self._before = _read(client, self._keys)

    def since(self) -> dict[ClaimResult, int]:
        now = _read(self._client, self._keys)
        return {result: now[result] - self._before[result] for result in ClaimResult}

    async def consumed(
        self, result: ClaimResult, copies: int, what: str, within: float = 30.0
    ) -> dict[ClaimResult, int]:
        """Wait until the claim ended ``copies`` more messages with ``result``, then
        check it ended exactly that many (none other copy counted). Returns the counts
        since this object was made."""
        try:
            async with asyncio.timeout(within):
                while self.since()[result] < copies:  # noqa: ASYNC110 (polls Redis)
                    await asyncio.sleep(0.01)
        except TimeoutError:
            raise AssertionError(
                f"{what}: the claim never counted {copies} message(s) as {result.value!r} "
                f"within {within} s; counted since: {self._shown()}"
            ) from None
        counts = self.since()
        assert counts[result] == copies, f"{what}: more than {copies}: {self._shown()}"
        return counts

    def _shown(self) -> dict[str, int]:
        return {result.value: count for result, count in self.since().items() if count}
