"""What the worker's actors survive, and how they wait it out: ACTOR_FAILURES, back_off,
until_taken."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from redis.exceptions import RedisError

from rsched._core.backoff import Backoff
from rsched._core.errors import StateError
from rsched._core.log import get_logger

log = get_logger("rsched.worker")

# What an actor survives (logs, backs off, carries on): Redis unreachable or refusing, a key
# someone overwrote with the wrong type, bytes that are not UTF-8 in an entry.
ACTOR_FAILURES = (RedisError, OSError, StateError, UnicodeDecodeError)


async def back_off(backoff: Backoff, actor: str, exc: BaseException) -> None:
    """Log a transient failure of an actor and wait the backoff's next delay."""
    delay = backoff.next()
    log.warning("redis.error", actor=actor, error=str(exc), retry_s=round(delay, 2))
    await anyio.sleep(delay)


async def until_taken(call: Callable[[], Awaitable[Any]], actor: str) -> StateError | None:
    """Run a recording script until Redis takes it, backing off while Redis fails.

    A StateError (a key of the wrong type) is not transient: it is returned, not retried, and
    the entries stay pending; they are reclaimed and, failing again, end as poison.
    """
    backoff = Backoff()
    while True:
        try:
            await call()
            return None
        except StateError as exc:
            return exc
        except ACTOR_FAILURES as exc:
            await back_off(backoff, actor, exc)
