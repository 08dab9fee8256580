"""The activity counters against real servers: each event counted once where it happens (a herd's
fires, worker outcomes, a re-sent call), slots cleared on rollover, reads gathered across
partitions (Client.activity)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

import rsched
from rsched import Client, Schedule
from rsched._core.activity import COUNTERS
from rsched._core.codes import Code
from rsched._core.fire_plan import FireItem, FireSpec
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from rsched._store.schedules import ScheduleStore
from tests.support.leading import firing, leases
from tests.support.placement import move_to
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings
from tests.support.workers import running, store_for

HOUR_MS = 3_600_000


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[Client]:
    async with Client.from_settings(settings) as c:
        yield c


def total(points: Any, name: str) -> int:
    return sum(p[name] for p in points)


async def due_items(store: ScheduleStore, ids: list[str], late_ms: int = 40) -> list[FireItem]:
    now = await store.time_ms()
    items = []
    for sid in ids:
        await move_to(store.redis, store.keys, sid, now - late_ms)
    for sid, fields in zip(ids, await store.fields(ids), strict=True):
        assert fields is not None
        spec = FireSpec.from_hash(fields)
        sched = now - late_ms
        items.append(
            FireItem(sid, fields["version"], sched, sched, sched + HOUR_MS, "fire", 1, spec)
        )
    return items


@pytest.mark.cluster
async def test_a_herd_counts_each_fire_once_with_its_lag(
    redis: Redis, settings: Settings, client: Client
) -> None:
    store = ScheduleStore(redis, Keys(settings.prefix))
    ids = [f"h{i}" for i in range(300)]
    await client.add_many([{"id": sid, "task": "t", "every": 3600} for sid in ids])
    lease, _ = await leases(store).acquire("test-owner", 60_000)
    assert lease is not None
    items = await due_items(store, ids)
    fires = firing(store)
    assert set(await fires.fire(lease, items[:200]) or []) == {Code.FIRED}
    assert set(await fires.fire(lease, items[200:]) or []) == {Code.FIRED}
    # A re-sent call (redis-py after a connection error) finds every item fired: counts nothing.
    assert set(await fires.fire(lease, items[:200]) or []) == {Code.STALE}
    act = await client.activity()
    assert len(act.minutes) == 60
    assert len(act.hours) == 24
    assert total(act.minutes, "fired") == 300
    assert total(act.hours, "fired") == 300
    assert total(act.minutes, "skipped") == 0
    lags = [sum(p.lags) for p in act.minutes]
    assert sum(lags) == 300
    last = next(p for p in reversed(act.minutes) if p["fired"])
    assert last.p50_ms is not None
    assert 40 <= last.p50_ms <= 2_500  # its bucket's upper bound
    # One slot of each ring written: the hash stays small.
    raw = await redis.hgetall(Keys(settings.prefix).activity)
    assert len({str(name).split(":")[0] for name in raw}) == 2


async def test_worker_outcomes_are_counted(
    redis: Redis, settings: Settings, client: Client
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("ok")
    async def ok(job: rsched.Job) -> None:
        pass

    @worker.task("boom")
    async def boom(job: rsched.Job) -> None:
        raise ValueError("boom")

    store = store_for(redis, settings)
    for _ in range(5):
        await store.enqueue("ok", {})
    await client.enqueue("boom", {}, max_retries=1)
    # A job cancelled while it waits in the delayed set.
    delayed = await client.enqueue("ok", {}, delay=3600)
    assert await client.cancel(delayed.execution_id) == "delayed"

    async def counted() -> bool:
        act = await client.activity(minutes=5, hours=1)
        return (total(act.minutes, "completed"), total(act.minutes, "dead")) == (5, 1)

    async with running(worker, redis):
        await eventually(counted)
    act = await client.activity(minutes=5, hours=1)
    assert total(act.minutes, "failed") == 1  # the first attempt, retried
    assert total(act.minutes, "cancelled") == 1
    assert total(act.hours, "completed") == 5
    assert act.as_dict()["minutes"][-1].keys() >= set(COUNTERS)


async def test_a_new_minute_clears_its_slot_first(
    redis: Redis, settings: Settings, client: Client
) -> None:
    keys = Keys(settings.prefix)
    t = await redis.time()
    minute = (int(t[0]) * 1000 + int(t[1]) // 1000) // 60_000
    slot = f"m{minute % 64}"
    # The slot as a minute 64 minutes ago left it (and an hour slot of a day ago).
    old = minute - 64
    await redis.hset(keys.activity, mapping={slot: old, f"{slot}:fired": 7, f"{slot}:lag3": 7})
    await client.add({"id": "a", "task": "t", "every": 3600})
    store = ScheduleStore(redis, keys)
    lease, _ = await leases(store).acquire("test-owner", 60_000)
    assert lease is not None
    (item,) = await due_items(store, ["a"])
    await firing(store).fire(lease, [item])
    raw = await redis.hgetall(keys.activity)
    if raw.get(slot) == str(minute):  # not crossed into the next minute meanwhile
        assert raw[f"{slot}:fired"] == "1"
        assert f"{slot}:lag3" not in raw or raw[f"{slot}:lag3"] == "1"
    act = await client.activity()
    assert total(act.minutes, "fired") == 1  # the old minute is not one of the last hour's


async def test_bad_arguments_and_a_foreign_key(
    redis: Redis, settings: Settings, client: Client
) -> None:
    with pytest.raises(rsched.InvalidArgument, match="minutes"):
        await client.activity(minutes=61)
    with pytest.raises(rsched.InvalidArgument, match="hours"):
        await client.activity(hours=0)
    await redis.set(Keys(settings.prefix).activity, "not a hash")
    act = await client.activity()
    assert total(act.minutes, "fired") == 0
    # A fire beside it still fires (bookkeeping never refuses an outcome).
    await client.add({"id": "a", "task": "t", "every": 3600})
    store = ScheduleStore(redis, Keys(settings.prefix))
    lease, _ = await leases(store).acquire("test-owner", 60_000)
    assert lease is not None
    (item,) = await due_items(store, ["a"])
    assert await firing(store).fire(lease, [item]) == [Code.FIRED]


@pytest.mark.cluster
async def test_reads_are_gathered_across_partitions(
    redis: Redis, settings: Settings, prefix: str
) -> None:
    psettings = settings.model_copy(update={"partitions": 4})
    try:
        async with Client.from_settings(psettings) as client:
            ids = [f"p{i}" for i in range(40)]
            await client.add_many([{"id": sid, "task": "t", "every": 3600} for sid in ids])
            parts = Keys(prefix, 4).every_partition()
            fired = 0
            for k in parts:
                store = ScheduleStore(redis, k)
                mine = [sid for sid in ids if await redis.exists(k.schedule(sid))]
                if not mine:
                    continue
                lease, _ = await leases(store).acquire("test-owner", 60_000)
                assert lease is not None
                codes = await firing(store).fire(lease, await due_items(store, mine))
                fired += (codes or []).count(Code.FIRED)
            assert fired == 40
            written = [k for k in parts if await redis.exists(k.activity)]
            assert len(written) > 1
            act = await client.activity()
            assert total(act.minutes, "fired") == 40
    finally:
        found = [k async for k in redis.scan_iter(match=f"{{{prefix}:*", count=1000)]
        for key in found:
            await redis.delete(key)


def test_schedule_model_is_untouched() -> None:
    assert "activity" not in Schedule.model_fields


async def test_a_manual_run_counts_as_fired(client: Client) -> None:
    await client.add({"id": "m", "task": "t", "every": 3600, "overlap": "skip"})
    await client.trigger("m")
    await client.trigger("m")  # skipped: the first run is still queued
    act = await client.activity(minutes=2, hours=1)
    assert (total(act.minutes, "fired"), total(act.minutes, "skipped")) == (1, 1)


@pytest.mark.cluster
async def test_queue_depth_sampled_by_the_leader(
    redis: Redis, settings: Settings, client: Client
) -> None:
    from rsched._store.depth import sample_depth

    for _ in range(3):
        await client.enqueue("t", {}, queue="work")
    await client.enqueue("t", {}, queue="work", priority="high")
    await client.enqueue("t", {}, queue="work", delay=3600)
    keys = Keys(settings.prefix)
    t = await redis.time()
    now = int(t[0]) * 1000 + int(t[1]) // 1000
    assert await sample_depth(redis, keys, now) == 1
    points = await client.queue_depth("work", minutes=5)
    assert len(points) == 5
    assert (points[-1].waiting, points[-1].delayed) == (4, 1)
    assert points[0].waiting is None  # no sample then
    assert (await client.queue_depth("other"))[-1].waiting is None
    with pytest.raises(rsched.InvalidArgument, match="minutes"):
        await client.queue_depth("work", minutes=0)
    # Bounded: a sample an hour and more later reuses the slot.
    await sample_depth(redis, keys, now + 64 * 60_000)
    assert await redis.hlen(keys.depth) == 1


async def test_a_running_scheduler_samples_its_queues(settings: Settings, client: Client) -> None:
    from rsched import Scheduler
    from rsched._redis.connection import connect

    await client.enqueue("t", {}, queue="work")
    redis = connect(settings)
    scheduler = Scheduler(redis, settings)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(scheduler.run)

            async def sampled() -> bool:
                return (await client.queue_depth("work", minutes=2))[-1].waiting == 1

            await eventually(sampled)
            scheduler.stop()
    finally:
        await redis.aclose()


async def test_an_expired_job_counts_as_skipped(
    redis: Redis, settings: Settings, client: Client
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("late")
    async def late(job: rsched.Job) -> None:
        raise AssertionError("an expired job never runs")

    await client.enqueue("late", {}, start_deadline=0.05)
    await anyio.sleep(0.2)  # past its deadline before any worker reads it

    async def skipped() -> bool:
        return total((await client.activity(minutes=2, hours=1)).minutes, "skipped") == 1

    async with running(worker, redis):
        await eventually(skipped)
    assert total((await client.activity(minutes=2, hours=1)).minutes, "completed") == 0
