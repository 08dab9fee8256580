"""The activity counters {p}:activity: reading each partition's (the scripts write them,
lua/includes/activity.lua; rsched._core.activity reads the slots)."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rsched._core.keys import Keys


async def read_activity(redis: Redis, keys: Keys) -> dict[str, str]:
    """The partition's counters as stored (one HGETALL of at most 90 slots of a few fields);
    empty when the key holds another type (bookkeeping: never a reason to fail a page)."""
    try:
        raw = await redis.hgetall(keys.activity)
    except ResponseError as exc:
        if "WRONGTYPE" in str(exc):
            return {}
        raise
    return {str(k): str(v) for k, v in raw.items()}
