"""The spec cache's bound: the specs read longest ago make room, never those being planned."""

from __future__ import annotations

from typing import Any, cast

import anyio

from rsched._core.settings import SchedulerSettings
from rsched._scheduler.batching import Batching
from rsched._scheduler.spec_cache import SpecCache
from rsched._store.firing import FiringStore


class Specs:
    """A store answering every id with the fields of an hourly cron, counting the ids read."""

    def __init__(self) -> None:
        self.read: list[str] = []

    async def plan_fields(self, ids: list[str], names: Any) -> list[dict[str, str]]:
        self.read += ids
        return [{"version": "1:1", "task": "t", "cron": "0 * * * *"} for _ in ids]


def test_the_oldest_go_first_and_the_ids_being_planned_stay() -> None:
    async def main() -> None:
        cfg = SchedulerSettings(spec_cache_size=1_000)
        store = Specs()
        cache = SpecCache(cast(FiringStore, store), cast(Any, None), cfg, Batching(cfg))
        first = [f"s{i:04d}" for i in range(1_000)]
        await cache.cache(first)
        assert list(cache.specs) == first
        # The ten oldest are planned again with ten new ones: ten others make room.
        store.read.clear()
        planned = first[:10] + [f"n{i}" for i in range(10)]
        await cache.cache(planned)
        assert store.read == planned[10:]  # the cached ones are not read again
        assert len(cache.specs) == 1_000
        assert all(sid in cache.specs for sid in planned)
        assert not any(sid in cache.specs for sid in first[10:20])
        # A hit moves nothing.
        await cache.cache(first[20:30])
        assert list(cache.specs)[:10] == first[20:30]

    anyio.run(main)
