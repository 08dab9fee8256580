"""What the limits tests check: holds all released, and how many ran at once."""

from __future__ import annotations

from redis.asyncio import Redis

from rsched._core.keys import Keys
from rsched._core.settings import Settings


async def limits_empty(redis: Redis, settings: Settings) -> bool:
    """Nothing held and nothing waiting: every hold was released."""
    k = Keys(settings.prefix).limits
    return (
        not await redis.hgetall(k[0])
        and not await redis.zcard(k[1])
        and not await redis.zcard(k[4])
    )


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals (start, end) that overlap at one instant."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    now = most = 0
    for _, step in edges:  # an end sorts before a start at the same instant
        now += step
        most = max(most, now)
    return most
