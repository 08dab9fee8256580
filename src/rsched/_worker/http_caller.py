"""The built-in task ``rsched.http`` of a worker started with ``--http``: it calls a job's HTTP
target (rsched._core.http_target) and keeps the answer as the run's result.

One ``httpx.AsyncClient`` per worker, shared by every call (its pool keeps connections to the
targets open); this module is imported only by such a worker, so the others never import httpx.

Each call carries ``Idempotency-Key`` (the execution id: delivery is at least once, a receiver
dedupes on it), ``X-Rsched-Attempt``, ``X-Rsched-Schedule-Id`` for a schedule's job,
``X-Rsched-Timestamp`` and, with the target's secret or the deployment's ``http.secret``,
``X-Rsched-Signature`` (the alert webhook's HMAC, rsched._ops.webhook.signature).

What follows an answer: a 2xx completes the run; a 429, 408 or 5xx, a timeout or a failed
connection is retried with the job's backoff (a 429 or 503's Retry-After waits longer when it
asks to); any other status fails the job at once, without retry (HttpTargetError, not
retryable), since another attempt would get the same answer.

The SSRF guard (``http.allow_private`` off) sits in the connection pool's network backend: the
host is resolved there, every address it resolves to is checked, and the connection is opened to
a checked address. Checking the address actually connected to (not a name resolved earlier)
leaves no gap for a DNS answer that changes between a check and the connection (DNS
rebinding); the pool still knows the target by its host name, so the Host header, TLS's SNI and
the certificate's check are those of the URL. Redirects, when a target follows them, go through
the same pool and so the same guard.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable
from typing import Any

import anyio
import httpcore
import httpx

from rsched._core.errors import HttpTargetError, InvalidArgument
from rsched._core.http_target import (
    DEFAULT_METHOD,
    DEFAULT_TIMEOUT_S,
    check_target,
    display,
    refusal,
    request_body,
    retry_after_s,
)
from rsched._core.job import Job
from rsched._core.metrics import package_version
from rsched._core.settings import HttpSettings
from rsched._ops.webhook import SIGNATURE_HEADER, TIMESTAMP_HEADER, signature

IDEMPOTENCY_HEADER = "Idempotency-Key"
ATTEMPT_HEADER = "X-Rsched-Attempt"
SCHEDULE_HEADER = "X-Rsched-Schedule-Id"
#: Statuses worth another attempt: the server is busy, down or asks to come back.
RETRYABLE_STATUSES = frozenset({408, 429})
#: Statuses whose Retry-After is honoured (RFC 9110: 503 and 429; 3xx's means something else).
RETRY_AFTER_STATUSES = frozenset({429, 503})
#: Response headers a run's result keeps, when the answer has them.
KEPT_HEADERS = ("content-type", "location", "retry-after", "x-request-id")
#: Characters of the answer's text a failed attempt's error message quotes.
EXCERPT_CHARS = 200


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend that resolves a host itself and connects only to an address
    the SSRF guard allows (rsched._core.http_target.refusal)."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await _resolve(host, port, timeout)
        for address in addresses:
            why = refusal(address)
            if why is not None:  # one private answer is enough: the name is not to be trusted
                raise HttpTargetError(
                    f"refused to connect to {host} ({why}): the SSRF guard calls only public "
                    "addresses; set RSCHED_HTTP__ALLOW_PRIVATE=true (http.allow_private) on the "
                    "workers to allow it",
                    retryable=False,
                )
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise HttpTargetError("refused to connect to a Unix socket", retryable=False)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


async def _resolve(host: str, port: int, wait_s: float | None) -> list[str]:
    """The addresses of ``host``, in the resolver's order, each once."""
    try:
        with anyio.fail_after(wait_s):
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except TimeoutError:
        raise httpcore.ConnectTimeout(f"resolving {host} took longer than {wait_s}s") from None
    except OSError as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a connection pool whose network backend is :class:`GuardedBackend`
    (httpx takes no backend of its own: its pool is replaced, with the same settings)."""

    def __init__(self, limits: httpx.Limits) -> None:
        super().__init__(trust_env=False, limits=limits)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(),
        )


class HttpCaller:
    """The handler of ``rsched.http`` jobs: one shared client; :meth:`aclose` at the end."""

    def __init__(self, cfg: HttpSettings) -> None:
        self.cfg = cfg
        # Every connection stays open between calls: a worker's calls in flight (at most its
        # concurrency) reuse them instead of opening new ones.
        limits = httpx.Limits(
            max_connections=cfg.max_connections, max_keepalive_connections=cfg.max_connections
        )
        # No proxy from the environment (trust_env): a proxy would connect for us, unguarded.
        self.client = httpx.AsyncClient(
            transport=None if cfg.allow_private else GuardedTransport(limits),
            limits=limits,
            trust_env=False,
            headers={"User-Agent": f"rsched/{package_version()}"},
        )
        self._secret = cfg.secret.get_secret_value() if cfg.secret is not None else None

    async def aclose(self) -> None:
        await self.client.aclose()

    async def __call__(self, job: Job) -> dict[str, Any]:
        try:
            target = check_target(job.payload.get("http"))
        except InvalidArgument as exc:  # checked when it was written: edited by hand
            raise HttpTargetError(f"the job's target is invalid: {exc}", retryable=False) from None
        where = display(target)
        timeout_s = float(target.get("timeout_s", DEFAULT_TIMEOUT_S))
        body, content_type = request_body(target)
        request = self.client.build_request(
            target.get("method", DEFAULT_METHOD),
            target["url"],
            content=body or None,
            headers=self._headers(job, target, body, content_type),
            timeout=timeout_s,
        )
        started = time.perf_counter()
        try:
            # httpx's timeout bounds each read; this bounds the whole call.
            with anyio.fail_after(timeout_s):
                response = await self.client.send(
                    request,
                    stream=True,
                    follow_redirects=bool(target.get("follow_redirects", False)),
                )
                try:
                    text, truncated = await self._read(response)
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.TimeoutException):
            raise HttpTargetError(
                f"{where}: no answer within {timeout_s:g}s (http.timeout_s)"
            ) from None
        except httpx.TooManyRedirects as exc:
            raise HttpTargetError(f"{where}: {exc}", retryable=False) from None
        except httpx.HTTPError as exc:  # no connection, a broken or garbled answer
            raise HttpTargetError(f"{where}: {type(exc).__name__}: {exc or 'no detail'}") from None
        elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
        status = response.status_code
        if 200 <= status < 300:
            return _result(response, elapsed_ms, text, truncated)
        raise self._failure(where, response, text)

    def _headers(
        self, job: Job, target: dict[str, Any], body: bytes, content_type: str | None
    ) -> dict[str, str]:
        headers = dict(target.get("headers", {}))
        if content_type is not None and not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = content_type
        headers[IDEMPOTENCY_HEADER] = job.execution_id
        headers[ATTEMPT_HEADER] = str(job.attempt)
        if job.schedule_id:
            headers[SCHEDULE_HEADER] = job.schedule_id
        timestamp = str(int(time.time()))
        headers[TIMESTAMP_HEADER] = timestamp
        secret = target.get("secret") or self._secret
        if secret:
            headers[SIGNATURE_HEADER] = signature(secret, timestamp, body)
        return headers

    async def _read(self, response: httpx.Response) -> tuple[str, bool]:
        """The first ``max_response_bytes`` of the answer as text, and whether there was more
        (the rest is not read: the connection is dropped instead)."""
        most = self.cfg.max_response_bytes
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > most:
                break
        raw = b"".join(chunks)
        text = raw[:most].decode(response.encoding or "utf-8", errors="replace")
        return text, size > most

    def _failure(self, where: str, response: httpx.Response, text: str) -> HttpTargetError:
        status = response.status_code
        excerpt = " ".join(text[:EXCERPT_CHARS].split())
        said = f"HTTP {status} {response.reason_phrase}".rstrip()
        if 300 <= status < 400:
            location = response.headers.get("location", "?")
            return HttpTargetError(
                f"{where}: {said}, a redirect to {location} not followed: give the final URL "
                "or http.follow_redirects = true",
                status=status,
                retryable=False,
            )
        retryable = status in RETRYABLE_STATUSES or status >= 500
        wait = None
        if status in RETRY_AFTER_STATUSES:
            asked = retry_after_s(response.headers.get("retry-after"), time.time())
            wait = None if asked is None else min(asked, self.cfg.max_retry_after_s)
        detail = f": {excerpt}" if excerpt else ""
        return HttpTargetError(
            f"{where}: {said}{detail}", status=status, retryable=retryable, retry_after_s=wait
        )


def _result(
    response: httpx.Response, elapsed_ms: float, text: str, truncated: bool
) -> dict[str, Any]:
    """A completed call's result: its status, time, the start of its answer, headers of note."""
    out: dict[str, Any] = {"status": response.status_code, "elapsed_ms": elapsed_ms, "body": text}
    if truncated:
        out["truncated"] = True
    headers = {name: response.headers[name] for name in KEPT_HEADERS if name in response.headers}
    if headers:
        out["headers"] = headers
    return out
