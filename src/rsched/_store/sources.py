"""Redis access for the bookkeeping of schedules files (``rsched sync``, in
rsched._client.schedules_file).

Each partition keeps the ids it holds of each file's schedules in ``{p}:source:<name>``; the
deployment keeps the path each file was last synced from in ``{prefix}:source_paths``. A
schedule's own ``source`` field says which file created it. docs/keys.md documents the keys.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from rsched._core.keys import Keys
from rsched._store.schedules import BULK_READ


class SourceStore:
    """The schedules files' indexes of ids of one partition, and their paths."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    async def source_of(self, schedule_id: str) -> str | None:
        """The ``source`` (schedules file) that created the schedule, if any."""
        source = await self.redis.hget(self.keys.schedule(schedule_id), "source")
        return str(source) if source else None

    async def ids(self, source: str) -> set[str]:
        """The ids in the index of a schedules file's schedules."""
        return {str(x) for x in await self.redis.smembers(self.keys.source(source))}

    async def add_ids(self, source: str, schedule_ids: Sequence[str]) -> None:
        for start in range(0, len(schedule_ids), BULK_READ):
            await self.redis.sadd(
                self.keys.source(source), *schedule_ids[start : start + BULK_READ]
            )

    async def forget(self, source: str, schedule_id: str) -> None:
        """Take an id out of a schedules file's index."""
        await self.redis.srem(self.keys.source(source), schedule_id)

    async def path(self, source: str) -> str | None:
        """The resolved path of the schedules file last synced under ``source``, if recorded."""
        path = await self.redis.hget(self.keys.source_paths, source)
        return str(path) if path else None

    async def set_path(self, source: str, path: str) -> None:
        await self.redis.hset(self.keys.source_paths, source, path)
