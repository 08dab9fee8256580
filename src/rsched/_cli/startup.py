"""A process's start (``rsched-scheduler``, ``rsched-worker``): waiting for Redis until it serves
the process, and the one error that stopped a main, for the one line it prints.

A pod may start before its Redis: the process waits as it does after start when Redis goes
away (with backoff), instead of exiting and being restarted in a loop. Waiting cannot fix a
wrong password, database, TLS setting or server: those stop the process at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from redis.exceptions import RedisError

from rsched._core.backoff import Backoff
from rsched._core.log import EventLogger
from rsched._core.settings import Settings
from rsched._redis.connection import PERMANENT, explain

T = TypeVar("T")

#: The longest pause between two attempts: a server that came up is found this soon at most.
RETRY_MAX_S = 5.0
#: The least time between two ``redis.waiting`` lines (the first attempts follow each other fast).
LOG_EVERY_S = 5.0


async def wait_for_server(
    start: Callable[[], Awaitable[T]], settings: Settings, log: EventLogger
) -> T:
    """``await start()`` (a process's first calls to Redis) until it succeeds, and return what it
    returned.

    A server that is down, does not answer, loads its data or is full (refused, reset, timed
    out, LOADING, OOM, maxclients) is waited for with backoff, logging ``redis.waiting`` with
    the reason and the next retry at most every :data:`LOG_EVERY_S`. Raises at once the
    :data:`~rsched._redis.connection.PERMANENT` errors (a wrong password, database, TLS setting or
    server) and whatever RschedError ``start`` raises itself (e.g. PartitionMismatch). Cancel
    the caller's scope to stop waiting.
    """
    backoff = Backoff(maximum_s=RETRY_MAX_S)
    logged_at: float | None = None
    attempt = 0
    while True:
        attempt += 1
        try:
            return await start()
        except (RedisError, OSError) as exc:
            error = await explain(exc, settings)
            if isinstance(error, PERMANENT):
                raise error from None
            delay = backoff.next()
            now = anyio.current_time()
            if logged_at is None or now - logged_at >= LOG_EVERY_S:
                logged_at = now
                log.warning(
                    "redis.waiting", reason=str(error), attempt=attempt, retry_s=round(delay, 1)
                )
        await anyio.sleep(delay)


def sole(exc: BaseException) -> BaseException:
    """``exc``, or the one error inside it when it is an exception group of one (nested or not):
    a task group wraps what one of its tasks raised (a probe port in use, a mismatch found at
    start), and the main reports that error in one line like any other."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
