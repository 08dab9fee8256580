"""The alert webhook: events POSTed as signed JSON, retried with backoff, never blocking anyone.

``offer`` puts an event in a bounded in-memory queue and returns at once; when the queue is
full the event is dropped (a log line, the ``dropped`` counter). The sender actor posts one
event at a time with the standard library (urllib, in a worker thread), retrying a failed POST
(connection error, timeout, any non-2xx answer) with exponential backoff up to
``health.webhook_attempts`` times.

Each POST carries ``X-Rsched-Timestamp`` (unix seconds) and, with a secret,
``X-Rsched-Signature: sha256=<hex>``: HMAC-SHA256 with the secret of ``<timestamp>.<body>``.
A receiver recomputes it and refuses an old timestamp, so a captured request cannot be replayed
later.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import time
import urllib.error
import urllib.request
from typing import Any

import anyio
import anyio.to_thread
import orjson
from anyio.abc import TaskStatus

from rsched._core.backoff import Backoff
from rsched._core.log import get_logger
from rsched._core.settings import HealthSettings

log = get_logger("rsched.alerts")

TIMESTAMP_HEADER = "X-Rsched-Timestamp"
SIGNATURE_HEADER = "X-Rsched-Signature"


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Rsched-Signature`` value of a body sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def _post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


class WebhookSender:
    """One alert webhook: ``offer`` events, ``run`` posts them."""

    def __init__(self, url: str, secret: str | None, cfg: HealthSettings) -> None:
        self.url = url
        self.secret = secret
        self.cfg = cfg
        self.sent = self.dropped = self.failed = 0
        self._send, self._recv = anyio.create_memory_object_stream[dict[str, Any]](
            cfg.webhook_queue_size
        )

    def offer(self, event: dict[str, Any]) -> bool:
        """Queue one event (JSON-ready) without waiting; False when the queue was full."""
        try:
            self._send.send_nowait(event)
        except anyio.WouldBlock:
            self.dropped += 1
            log.warning("alert.dropped", kind=event.get("kind"), dropped=self.dropped)
            return False
        return True

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async with self._recv:
            async for event in self._recv:
                await self.deliver(event)

    async def deliver(self, event: dict[str, Any]) -> bool:
        """POST one event, retried with backoff; False when every attempt failed."""
        body = orjson.dumps(event)
        backoff = Backoff(0.5, 30.0)
        problem = ""
        for attempt in range(1, self.cfg.webhook_attempts + 1):
            timestamp = str(int(time.time()))
            headers = {"Content-Type": "application/json", TIMESTAMP_HEADER: timestamp}
            if self.secret:
                headers[SIGNATURE_HEADER] = signature(self.secret, timestamp, body)
            try:
                status = await anyio.to_thread.run_sync(
                    _post, self.url, body, headers, self.cfg.webhook_timeout_s,
                    abandon_on_cancel=True,
                )  # fmt: skip
            # URLError and timeouts are OSErrors; a garbled answer is an HTTPException.
            except (OSError, ValueError, http.client.HTTPException) as exc:
                problem = str(exc)
            else:
                if 200 <= status < 300:
                    self.sent += 1
                    return True
                problem = f"HTTP {status}"
            if attempt < self.cfg.webhook_attempts:
                delay = backoff.next()
                log.warning("alert.retry", kind=event.get("kind"), error=problem, retry_s=delay)
                await anyio.sleep(delay)
        self.failed += 1
        log.error("alert.failed", kind=event.get("kind"), error=problem, failed=self.failed)
        return False
