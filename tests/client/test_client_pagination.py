"""Paging through 10,000 schedules: every one exactly once, in next-run order, never KEYS."""

from __future__ import annotations

import time
from typing import Any

import pytest
from redis.asyncio import Redis

from rsched import Client, Schedule, Settings
from rsched._core.codes import Code
from rsched._core.keys import Keys
from rsched._core.timing import first_run_ms
from rsched._store.schedules import ScheduleStore

N = 10_000


async def bulk_add(redis: Redis, settings: Settings, schedules: list[Schedule]) -> None:
    """Create schedules through upsert.lua in pipelined batches (the SDK's add is one round trip
    per call; 10k of those would dominate the test)."""
    store = ScheduleStore.from_settings(redis, settings)
    k = store.keys
    script = store.script("upsert")
    now = await store.time_ms()
    for start in range(0, len(schedules), 1000):
        async with redis.pipeline(transaction=False) as pipe:
            for s in schedules[start : start + 1000]:
                flat = [v for pair in s.spec_fields().items() for v in pair]
                op_key, op_id = k.new_op()
                keys = [k.schedules, k.schedule(s.id), k.pending(s.id), k.queues, op_key]
                keys += (k.parked_of(s.id), k.parked, k.audit, k.specs(s.id))
                args: list[Any] = [s.id, "add", "", first_run_ms(s, now), "0", s.queue, k.wake]
                args += [op_id, now, store.park_after_ms, store.audit_arg(), "", 0, 0, *flat]
                await script(keys=keys, args=args, client=pipe)
            results = await pipe.execute()
        assert all(r[0] == Code.OK for r in results)


@pytest.mark.slow
async def test_pagination_over_10k_schedules(redis: Redis, settings: Settings) -> None:
    client = Client(redis, settings)
    await bulk_add(
        redis,
        settings,
        [
            Schedule(id=f"s{i:05d}", task="t", every=60 + i % 700, queue="q" if i % 10 else "tens")
            for i in range(N)
        ],
    )
    await redis.zadd(Keys(settings.prefix).schedules, {"s00042": "+inf"})  # as if paused
    started = time.monotonic()
    seen: list[str] = []
    scores: list[float] = []
    cursor = None
    pages = 0
    while True:
        page = await client.list(limit=997, cursor=cursor)
        pages += 1
        seen += [s.id for s in page.items]
        scores += [s.next_run.timestamp() if s.next_run else float("inf") for s in page.items]
        cursor = page.cursor
        if cursor is None:
            break
    elapsed = time.monotonic() - started
    assert len(seen) == N
    assert len(set(seen)) == N
    assert pages == 11
    assert seen[-1] == "s00042"  # +inf sorts last
    assert scores[:-1] == sorted(scores[:-1])
    # A filter that matches one in ten still fills whole pages.
    tens = await client.list(queue="tens", limit=500)
    assert len(tens.items) == 500
    assert all(s.queue == "tens" for s in tens.items)
    rest = await client.list(queue="tens", limit=500, cursor=tens.cursor)
    assert len(rest.items) == 500
    assert rest.cursor is None or (await client.list(queue="tens", cursor=rest.cursor)).items == []
    assert elapsed < 20, f"paging 10k schedules took {elapsed:.1f}s"
