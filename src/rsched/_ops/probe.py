"""A tiny HTTP responder for ``/metrics``, ``/livez`` and ``/readyz``, on the process's loop.

An anyio actor, not a thread: it answers only while the event loop runs (which is what
``/livez`` claims) and stops with the task group that started it. Each request is read whole
(one GET, no body) under a short deadline, answered with ``Content-Length`` and closed: a
scraper or a probe needs nothing more, and nothing here can hold the process up.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import orjson
from anyio.abc import SocketAttribute, SocketStream, TaskStatus
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._core.errors import ConfigError
from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS
from rsched._core.settings import Settings
from rsched._ops.deployment_gauges import watch_deployment
from rsched._redis.connection import connect
from rsched._redis.scripts import ScriptCaller

log = get_logger("rsched.metrics")

# What /readyz awaits: (ready, details for the JSON body).
Readiness = Callable[[], Awaitable[tuple[bool, dict[str, Any]]]]

REQUEST_MAX_BYTES = 8_192
REQUEST_TIMEOUT_S = 5.0
READY_TIMEOUT_S = 2.0
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


async def serve(
    host: str,
    port: int,
    ready: Readiness,
    *,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; ``task_status.started`` gets the bound port (``port`` 0 picks
    one). Raises ConfigError when it cannot listen there. Turns metrics counting on."""
    try:
        listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    except OSError as exc:
        raise ConfigError(
            f"--metrics-port / RSCHED_METRICS_PORT: cannot listen on {host}:{port} ({exc}); "
            "choose a free port or set RSCHED_METRICS_HOST"
        ) from None
    async with listener:
        bound = int(listener.extra(SocketAttribute.local_port))
        METRICS.on = True
        log.info("metrics.listening", host=host, port=bound)
        task_status.started(bound)
        await listener.serve(functools.partial(_answer, ready))


async def _answer(ready: Readiness, stream: SocketStream) -> None:
    async with stream:
        try:
            with anyio.fail_after(REQUEST_TIMEOUT_S):
                request = await _read_request(stream)
                if request is None:
                    return
                status, content_type, body = await _route(ready, *request)
                head = (
                    f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
                    f"Content-Type: {content_type}\r\n"
                    f"Content-Length: {len(body)}\r\n"
                    "Cache-Control: no-store\r\n"
                    "Connection: close\r\n\r\n"
                )
                await stream.send(head.encode() + (b"" if request[0] == "HEAD" else body))
        except (OSError, TimeoutError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass  # the client went away or stalled: nothing to answer


async def _read_request(stream: SocketStream) -> tuple[str, str] | None:
    """(method, path) of the request, or None when it is not one we can read."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > REQUEST_MAX_BYTES:
            return None
        data += await stream.receive()
    parts = data.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    if len(parts) != 3:
        return None
    return parts[0], parts[1].split("?", 1)[0]


async def _route(ready: Readiness, method: str, path: str) -> tuple[int, str, bytes]:
    if method not in ("GET", "HEAD"):
        return 405, "application/json", orjson.dumps({"error": "only GET and HEAD"})
    if path == "/metrics":
        return 200, CONTENT_TYPE_LATEST, generate_latest(METRICS.registry)
    if path == "/livez":
        # Answered by the event loop itself: if this runs, the loop does.
        return 200, "application/json", orjson.dumps({"live": True})
    if path == "/readyz":
        try:
            with anyio.fail_after(READY_TIMEOUT_S):
                ok, details = await ready()
        except TimeoutError:
            ok, details = False, {"reason": f"no answer within {READY_TIMEOUT_S:g} s"}
        except Exception as exc:  # a probe reports; it never crashes the process
            ok, details = False, {"reason": f"{type(exc).__name__}: {exc}"}
        return (200 if ok else 503), "application/json", orjson.dumps({"ready": ok, **details})
    return 404, "application/json", orjson.dumps({"error": "try /metrics, /livez or /readyz"})


async def redis_and_scripts(redis: Redis, names: Sequence[str]) -> dict[str, Any] | None:
    """None when Redis answers and holds every script in ``names`` (loading any it lacks),
    else the reason for /readyz."""
    try:
        await redis.ping()
    except (RedisError, OSError) as exc:
        return {"reason": f"redis does not answer: {exc}"}
    caller = ScriptCaller(redis)
    try:
        loaded = await caller.ensure_loaded(names)
    except (RedisError, OSError) as exc:
        return {"reason": f"scripts cannot be loaded: {exc}"}
    if loaded:
        log.info("metrics.scripts_loaded", scripts=",".join(loaded))
    return None


async def operate(
    settings: Settings,
    readiness: Callable[[Redis], Awaitable[tuple[bool, dict[str, Any]]]],
    keys: Callable[[], Keys],
    leads: Callable[[], bool],
    *,
    task_status: TaskStatus[int],
) -> None:
    """Serve a process's probe on ``--metrics-port`` (``readiness`` answers /readyz) and read the
    deployment's gauges over the partitions of ``keys()`` (the schedules by state too while
    ``leads()``). Both use their own small Redis client, so a readiness check or a gauge read
    never queues behind the process's own traffic (a worker's blocking reads), and report what
    that client sees."""
    assert settings.metrics_port is not None
    redis = connect(settings, socket_timeout_s=READY_TIMEOUT_S)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_deployment, redis, settings, keys, leads)
            ready = functools.partial(readiness, redis)
            port = await tg.start(serve, settings.metrics_host, settings.metrics_port, ready)
            task_status.started(port)
    finally:
        with anyio.CancelScope(shield=True):
            await redis.aclose()
