"""In-process schedulers for the tests: settings with short leases, schedulers running for a
block, and the jobs they sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import anyio
from redis.asyncio import Redis

from rsched import Schedule, Scheduler
from rsched._core.keys import Keys
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


def daily_far_from_now() -> str:
    """A daily cron about twelve hours from now, whatever the time: a fixed hour would be due
    within the parking horizon, or just fired, for part of every day."""
    return f"0 {(datetime.now(UTC).hour + 12) % 24} * * *"


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


@asynccontextmanager
async def scheduling(
    redis: Redis, settings: Settings, *, task: str = "t", **spec: Any
) -> AsyncIterator[ScheduleStore]:
    """Schedule ``s1`` of ``task`` (``spec`` on top), first due in 100 ms, with a Scheduler
    running for the block: its store."""
    store = ScheduleStore(redis, Keys(settings.prefix))
    now = await store.time_ms()
    await store.write(
        Schedule(id="s1", task=task, **spec),
        mode="add",
        expect_gen=None,
        next_ms=now + 100,
        created_ms=now,
    )
    scheduler = Scheduler(redis, settings)
    async with anyio.create_task_group() as tg:
        await tg.start(scheduler.run)
        try:
            yield store
        finally:
            scheduler.stop()


async def events(store: ScheduleStore) -> list[dict[str, Any]]:
    """The history of ``s1``, oldest first."""
    return list(reversed(await store.history("s1", 1000)))
