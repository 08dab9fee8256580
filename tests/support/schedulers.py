"""In-process schedulers for the tests: settings with short leases, schedulers running for a
block, and the jobs they sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from rsched import Scheduler
from rsched._core.settings import SchedulerSettings, Settings
from rsched._redis.connection import connect
from rsched._store.schedules import ScheduleStore


def quick(redis_url: str, prefix: str, topology: str) -> Settings:
    """Short lease and idle periods so the tests run in well under a second each."""
    return Settings(
        redis_url=redis_url,
        prefix=prefix,
        cluster=topology == "cluster",
        scheduler=SchedulerSettings(lease_ttl_ms=1000, lease_renew_ms=200, max_idle_ms=500),
    )


@asynccontextmanager
async def running(settings: Settings, count: int = 1) -> AsyncIterator[list[Scheduler]]:
    """``count`` schedulers, each with its own connection, stopped (gracefully) on exit."""
    clients = [connect(settings) for _ in range(count)]
    schedulers = [Scheduler(client, settings) for client in clients]
    try:
        async with anyio.create_task_group() as tg:
            for scheduler in schedulers:
                await tg.start(scheduler.run)
            yield schedulers
            for scheduler in schedulers:
                scheduler.stop()
    finally:
        for client in clients:
            await client.aclose()


async def jobs(store: ScheduleStore, queue: str = "default") -> list[dict[str, str]]:
    entries: Any = await store.redis.xrange(store.keys.queue(queue))
    return [fields for _, fields in entries]
