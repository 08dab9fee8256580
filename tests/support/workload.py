"""A small workload that goes through every script: a scheduler and a worker running together,
some schedules (paused, resumed, backfilled, parked and brought back), tasks that pass and fail."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import anyio

import rsched
from rsched._core.settings import Settings
from rsched._redis.connection import connect
from rsched._scheduler.scheduler import Scheduler
from rsched._store import parking
from rsched._store.schedules import ScheduleStore


@asynccontextmanager
async def engine(settings: Settings, worker: rsched.Worker) -> AsyncIterator[Scheduler]:
    """A scheduler and ``worker`` running on their own connections."""
    redis = connect(settings)
    scheduler = Scheduler(redis, settings)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(scheduler.run)
            await tg.start(worker.run)
            try:
                yield scheduler
            finally:
                scheduler.stop()
                worker.stop()
    finally:
        await redis.aclose()


async def some_schedules(client: rsched.Client) -> None:
    """Schedules through the client's writes: ``a`` (t.ok every 0.2 s, buffer_one), ``m0``..``m2``
    (hourly; ``m0`` paused and resumed, ``m2`` backfilled over the last 3 hours)."""
    now = datetime.now(UTC)
    await client.add({"id": "a", "task": "t.ok", "every": 0.2, "overlap": "buffer_one"})
    await client.add_many([{"id": f"m{i}", "task": "t.ok", "every": 3600} for i in range(3)])
    await client.pause("m0")
    await client.resume("m0")
    await client.backfill("m2", now - timedelta(hours=3), now)


async def park_and_bring_back(store: ScheduleStore, lease: str) -> None:
    """Park the schedules due far off (the hourly ``m`` ones of :func:`some_schedules`), list
    them, and bring back one whose bucket's bound is made due (nothing in it is due yet)."""
    keys = store.keys
    assert await parking.park(store, lease)
    parked = await parking.buckets(store.redis, keys)
    assert parked
    listed = [sid for sid, _ in await parking.after(store, None, 100)]
    assert {"m0", "m1", "m2"} <= set(listed)
    assert (await parking.counts(store, await store.time_ms())).total >= 3
    await store.redis.zadd(keys.parked, {parked[0].rsplit(":", 1)[1]: 0})
    assert await parking.unpark(store, lease) == (0, None)


def ok_and_failing_tasks(worker: rsched.Worker, ran: list[str]) -> None:
    """Tasks ``t.ok`` (records its execution id in ``ran``) and ``t.fail`` (retried once, then
    a dead letter)."""

    @worker.task("t.ok")
    async def ok(job: rsched.Job) -> None:
        ran.append(job.execution_id)

    @worker.task("t.fail")
    async def fail(job: rsched.Job) -> None:
        if job.attempt == 1:
            raise rsched.Retry(delay_s=0.05)
        raise ValueError("boom")
