"""Opening Redis connections the same way everywhere (scheduler, worker, client, CLI)."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from rsched._errors import ConfigError
from rsched._log import EventLogger

_LOOPBACK_HINT = "e.g. redis://127.0.0.1:6379/0 or rediss://user:pass@host:6380/0"


def connect(url: str, *, socket_timeout_s: float | None = 10.0) -> Redis:
    """An async client with decoded responses and a short, bounded retry on connection errors.

    Every script rsched sends is safe to run twice, so redis-py's re-send after a dropped
    connection cannot apply an operation twice. (The retry must be redis.asyncio's: the sync
    one would wrap only the creation of each coroutine and never retry anything.)
    """
    try:
        return Redis.from_url(
            url,
            decode_responses=True,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=5.0,
            health_check_interval=15,
            retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3),
            retry_on_error=[RedisConnectionError, RedisTimeoutError],
        )
    except ValueError as exc:
        raise ConfigError(f"redis_url {url!r} is invalid ({exc}); {_LOOPBACK_HINT}") from None


async def warn_if_unsafe(redis: Redis, log: EventLogger) -> list[str]:
    """Log (and return) warnings when the server's settings can lose rsched's data.

    rsched keeps all state in Redis: with no persistence a restart forgets every schedule, and
    an eviction policy other than noeviction silently deletes keys under memory pressure.
    """
    warnings: list[str] = []
    try:
        persistence = await redis.info("persistence")
        policy = (await redis.config_get("maxmemory-policy")).get("maxmemory-policy", "")
    except RedisError as exc:  # CONFIG may be renamed or disabled on managed services
        log.info("server.check_skipped", reason=str(exc))
        return warnings
    if not int(persistence.get("aof_enabled", 0)):
        warnings.append(
            "appendonly is off: a server restart loses schedules and jobs written since the "
            "last snapshot (set appendonly yes)"
        )
    if policy and policy != "noeviction":
        warnings.append(
            f"maxmemory-policy is {policy}: under memory pressure the server deletes rsched's "
            "keys (set maxmemory-policy noeviction)"
        )
    for text in warnings:
        log.warning("server.unsafe", detail=text)
    return warnings
