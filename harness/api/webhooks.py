"""Completion webhooks: a signed POST of the settled task to an allow-listed URL.

Each webhook is a JSON body ``{"type": "task.settled", "task": <TaskResource>}`` with the
headers ``Webhook-Id`` (the task id: a receiver deduplicates retries by it) and
``Webhook-Signature: t=<unix seconds>,v1=<hex>``, where ``hex`` is HMAC-SHA256 with the
configured secret over ``<t>.<body>``. A receiver recomputes it and rejects old ``t``.

Delivery is attempted up to ``AHP_API_WEBHOOK_ATTEMPTS`` times with exponential backoff
on a connection error, 408, 429 or 5xx; any other answer ends it. Redirects are not
followed. Only hosts in ``AHP_API_WEBHOOK_HOSTS`` are accepted, checked when the task is
created (422, nothing started).

Limit: the webhook is delivered by the API process that created the task, from memory.
If that process stops before the task settles, the webhook is not sent (the task itself
is unaffected; ``GET /v1/tasks/{id}`` and its events still report it).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx

from harness.task import CeleryTask
from wire.backoff import Retries
from wire.codec import dumps

from .problems import Issue
from .settings import ApiSettings

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "Webhook-Signature"
ID_HEADER = "Webhook-Id"
_RETRY_STATUSES = frozenset({408, 425, 429})
_LONGEST_PAUSE = timedelta(minutes=5)


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """The ``Webhook-Signature`` header value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(secret: bytes, header: str, body: bytes) -> bool:
    """Whether ``header`` signs ``body`` (for receivers and tests; no age check)."""
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(parts.get("t", ""))
    except ValueError:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), header)


class Webhooks:
    """Checks webhook URLs against the allow-list and delivers them."""

    def __init__(self, settings: ApiSettings) -> None:
        self._settings = settings
        self._pending: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None

    def issues(self, url: str) -> list[Issue]:
        """Why ``url`` may not receive webhooks (empty: it may)."""
        path = "body.webhook.url"
        if self._settings.webhook_secret is None or not self._settings.webhook_hosts:
            return [Issue(path=path, message="webhooks are not enabled on this deployment")]
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            return [Issue(path=path, message="not a valid URL")]
        schemes = {"https", "http"} if self._settings.webhook_allow_http else {"https"}
        if parts.scheme not in schemes:
            return [Issue(path=path, message=f"the scheme must be {' or '.join(sorted(schemes))}")]
        if parts.username is not None or parts.password is not None:
            return [Issue(path=path, message="credentials in the URL are not accepted")]
        host = (parts.hostname or "").lower()
        allowed = self._settings.webhook_hosts
        if not host or (host not in allowed and f"{host}:{port}" not in allowed):
            return [Issue(path=path, message="the host is not in the webhook allow-list")]
        return []

    def deliver_when_settled(
        self,
        task: CeleryTask,
        url: str,
        payload: Callable[[], Awaitable[dict[str, Any]]],
    ) -> None:
        """Once ``task`` settles, POST ``await payload()`` to ``url`` (in the background)."""
        delivery = asyncio.create_task(self._deliver(task, url, payload))
        self._pending.add(delivery)
        delivery.add_done_callback(self._pending.discard)

    async def _deliver(
        self,
        task: CeleryTask,
        url: str,
        payload: Callable[[], Awaitable[dict[str, Any]]],
    ) -> None:
        task_id = task.id.value
        try:
            await task.await_outcome()
            body = dumps({"type": "task.settled", "task": await payload()}).encode()
            await self._post(task_id, url, body)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("webhook of task %s not delivered: %s", task_id, type(error).__name__)

    async def _post(self, task_id: str, url: str, body: bytes) -> None:
        secret = self._settings.webhook_secret
        assert secret is not None  # checked at creation
        key = secret.get_secret_value().encode()
        retries = Retries(first=self._settings.webhook_first_delay, cap=_LONGEST_PAUSE)
        client = self._http()
        for attempt in range(1, self._settings.webhook_attempts + 1):
            headers = {
                "Content-Type": "application/json",
                ID_HEADER: task_id,
                SIGNATURE_HEADER: sign(key, int(time.time()), body),
            }
            try:
                response = await client.post(url, content=body, headers=headers)
            except httpx.HTTPError as error:
                outcome = type(error).__name__
            else:
                if response.status_code < 300:
                    return
                if response.status_code < 500 and response.status_code not in _RETRY_STATUSES:
                    log.warning("webhook of task %s refused with %d", task_id, response.status_code)
                    return
                outcome = str(response.status_code)
            if attempt < self._settings.webhook_attempts:
                log.info("webhook of task %s: attempt %d failed (%s)", task_id, attempt, outcome)
                await asyncio.sleep(retries.next_pause())
        log.warning("webhook of task %s not delivered after every attempt", task_id)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self._settings.webhook_timeout.total_seconds(), follow_redirects=False
            )
        return self._client

    async def aclose(self) -> None:
        for delivery in tuple(self._pending):
            delivery.cancel()
        if self._pending:
            await asyncio.wait(tuple(self._pending), timeout=1)
        if self._client is not None:
            await self._client.aclose()


__all__ = ["ID_HEADER", "SIGNATURE_HEADER", "Webhooks", "sign", "verify"]
