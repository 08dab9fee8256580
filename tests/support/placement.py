"""Where a schedule's entry is, the index or its parked bucket (rsched._store.parking), for tests
that read or set a next run by hand."""

from __future__ import annotations

from redis.asyncio import Redis

from rsched._core.keys import Keys
from rsched._store import parking
from rsched._store.schedules import ScheduleStore


async def parked_ids(store: ScheduleStore) -> set[str]:
    k = store.keys
    out: set[str] = set()
    for key in await parking.buckets(store.redis, k):
        out |= {str(m) for m in await store.redis.zrange(key, 0, -1)}
    return out


async def next_score(redis: Redis, keys: Keys, sid: str) -> float | None:
    """A schedule's score (next run, ms; +inf when none), in the index or parked."""
    found = await redis.zscore(keys.schedules, sid)
    return found if found is not None else await redis.zscore(keys.parked_of(sid), sid)


async def move_to(redis: Redis, keys: Keys, sid: str, score: float) -> None:
    """Set a schedule's next run by hand, in the index, as after a scheduler outage."""
    await redis.zrem(keys.parked_of(sid), sid)
    await redis.zadd(keys.schedules, {sid: score})


async def indexed_ids(redis: Redis, keys: Keys) -> set[str]:
    """Every schedule id of a partition, in the index or parked."""
    return {str(m) for m in await redis.zrange(keys.schedules, 0, -1)} | await parked_ids(
        ScheduleStore(redis, keys)
    )
