"""Parked schedules (rsched._store.parking): a schedule whose next run is far off leaves the
index for a small bucket, reads as before everywhere, is back in the index before it is due, and
every write of it takes it out of its bucket again. A schedule is in the index or in its bucket,
never both."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from rsched import Client, Schedule
from rsched._core.keys import Keys, parked_bucket
from rsched._core.schedule import to_ms
from rsched._core.settings import Settings
from rsched._scheduler import ticker
from rsched._scheduler.retention import Retention
from rsched._store import parking
from rsched._store.schedules import ScheduleStore
from tests.support.history import int_b62
from tests.support.leading import leases
from tests.support.placement import parked_ids
from tests.support.schedulers import daily_far_from_now, jobs, quick, running
from tests.support.waiting import eventually

HOUR_MS = 3_600_000


@pytest.fixture
def fast(redis_url: str, prefix: str, topology: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setattr(ticker, "PARK_EVERY_S", 0.05)
    return quick(redis_url, prefix, topology)


@pytest.fixture
def store(redis: Redis, fast: Settings) -> ScheduleStore:
    return ScheduleStore(redis, Keys(fast.prefix))


async def where(store: ScheduleStore, sid: str) -> tuple[float | None, float | None]:
    """(score in the index, score in its parked bucket) of one schedule."""
    k = store.keys
    return await store.redis.zscore(k.schedules, sid), await store.redis.zscore(
        k.parked_of(sid), sid
    )


async def lease(store: ScheduleStore) -> str:
    got, _ = await leases(store).acquire("test", 60_000)
    assert got is not None
    return got


def listed(page: list[Schedule]) -> list[tuple[str, Any]]:
    return [(s.id, s.next_run) for s in page]


def _ms(s: Schedule) -> float:
    assert s.next_run is not None
    return float(to_ms(s.next_run))


async def hourly_and_held(client: Client) -> None:
    """``hourly`` (every hour) and ``held`` (every hour, paused): both parked by a leader."""
    await client.add({"id": "hourly", "task": "t", "every": 3600})
    await client.add({"id": "held", "task": "t", "every": 3600})
    await client.pause("held")


async def everything(client: Client, page_size: int = 7) -> list[Schedule]:
    return [s async for s in client.iter_schedules(page_size=page_size)]


@pytest.mark.cluster
async def test_the_leader_parks_what_is_due_far_off_and_every_reader_sees_it_as_before(
    fast: Settings, store: ScheduleStore
) -> None:
    # Written into the index, as an earlier rsched (or a write with parking off) left them.
    off = fast.model_copy(update={"scheduler": fast.scheduler.model_copy(update={"park": False})})
    async with Client.from_settings(off) as client:
        await client.add({"id": "minutely", "task": "t", "every": 60})
        await client.add({"id": "daily", "task": "t", "cron": daily_far_from_now()})
        await hourly_and_held(client)
        assert not await parked_ids(store)
        got = {sid: await client.get(sid) for sid in ("minutely", "hourly", "daily", "held")}
        page, stats = await everything(client), await client.stats()

        async with running(fast):
            await eventually(lambda: _parked(store, {"hourly", "daily", "held"}))

        assert await store.redis.zrange(store.keys.schedules, 0, -1) == ["minutely"]
        for sid in ("hourly", "daily", "held"):
            index, bucket = await where(store, sid)
            assert index is None
            assert bucket is not None
        assert {sid: await client.get(sid) for sid in got} == got
        assert listed(await everything(client)) == listed(page)
        assert (await client.stats()).schedules == stats.schedules
        assert (await client.stats()).due == 0
        assert not (await client.health()).schedules


async def _parked(store: ScheduleStore, ids: set[str]) -> bool:
    return ids <= await parked_ids(store)


async def test_a_parked_schedule_is_back_before_it_is_due_and_fires_on_time(
    fast: Settings, store: ScheduleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parking, "PARK_AFTER_MS", 1_500)
    monkeypatch.setattr(parking, "UNPARK_WITHIN_MS", 800)
    async with Client.from_settings(fast) as client:
        await client.add({"id": "x", "task": "t", "every": 4})
        async with running(fast):
            await eventually(lambda: _parked(store, {"x"}))
            await eventually(lambda: _has_job(store))
            # Back in its bucket once fired: its next run is 4 s away again.
            await eventually(lambda: _parked(store, {"x"}))
    (job,) = await jobs(store)
    assert int(job["fired_at"]) - int(job["scheduled_at"]) < 250


async def _has_job(store: ScheduleStore) -> bool:
    return bool(await jobs(store))


@pytest.mark.cluster
async def test_every_write_puts_a_schedule_where_its_next_run_says(
    fast: Settings, store: ScheduleStore
) -> None:
    """Writes park what is due far off themselves (the leader parks what a fire moved out
    there); a write that brings a schedule due soon puts it back in the index."""
    held = await lease(store)
    async with Client.from_settings(fast) as client:

        async def parked(sid: str, score: float | None = None) -> None:
            want = score if score is not None else _ms(await client.get(sid))
            assert await where(store, sid) == (None, want)

        async def indexed(sid: str) -> None:
            assert await where(store, sid) == (_ms(await client.get(sid)), None)

        await client.add({"id": "a", "task": "t", "every": 3600})
        await parked("a")
        await client.update("a", every=60)  # due within a minute: back in the index
        await indexed("a")
        await client.update("a", every=7200)
        await parked("a")
        await client.pause("a")
        await parked("a", float("inf"))
        assert (await client.stats()).schedules["paused"] == 1
        await client.resume("a")  # resume and trigger write the index; the leader parks
        await indexed("a")
        assert await parking.park(store, held) == 1
        await parked("a")
        await client.trigger("a")  # its next run stays: so does its place
        await parked("a")
        await client.upsert_many([{"id": "a", "task": "t2", "every": 30}])
        await indexed("a")
        await client.upsert_many([{"id": "a", "task": "t2", "every": 3600}])
        await parked("a")
        await client.remove("a")
        assert await where(store, "a") == (None, None)


async def test_parking_and_bringing_back_need_the_lease(store: ScheduleStore) -> None:
    store.park_after_ms = None  # written to the index, as an earlier rsched wrote it
    await store.save(Schedule(id="a", task="t", every=3600))
    held = await lease(store)
    assert await parking.park(store, "1:someone-else") is None
    assert await where(store, "a") != (None, None)
    assert (await where(store, "a"))[1] is None
    assert await parking.park(store, held) == 1
    await store.redis.zadd(store.keys.parked, {str(parked_bucket("a")): 0})
    assert await parking.unpark(store, "1:someone-else") is None
    assert (await where(store, "a"))[0] is None


async def test_a_parked_schedule_overdue_while_no_scheduler_ran_is_late_then_fired(
    fast: Settings, store: ScheduleStore
) -> None:
    async with Client.from_settings(fast) as client:
        await client.add({"id": "a", "task": "t", "every": 3600, "misfire_grace_s": 10})
        held = await lease(store)
        assert await parked_ids(store) == {"a"}
        # As if every scheduler had been down since the run came due a minute ago.
        due = await store.time_ms() - 60_000
        await store.redis.zadd(store.keys.parked_of("a"), {"a": due})
        await store.redis.zadd(store.keys.parked, {str(parked_bucket("a")): due})
        assert await leases(store).release(held)
        stats = await client.stats()
        assert stats.due == 1
        assert stats.oldest_overdue is not None
        assert stats.oldest_overdue["id"] == "a"
        assert [s.id for s in (await client.health()).schedules] == ["a"]
        async with running(fast):
            await eventually(lambda: _has_job(store))
    (job,) = await jobs(store)
    assert int(job["scheduled_at"]) == due


async def test_list_pages_merge_the_index_and_many_buckets_in_order(
    fast: Settings, store: ScheduleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parking, "READ_BUCKETS", 5)  # several script calls per page
    start = datetime.now(UTC) + timedelta(hours=1)
    specs: list[dict[str, Any]] = []
    for i in range(240):
        spec: dict[str, Any] = {"id": f"s{i:03d}", "task": "t"}
        if i % 3 == 0:
            spec["every"] = 60 + i  # soon: stays in the index
        elif i % 7 == 0:
            spec["cron"] = "0 3 * * *"  # herds of one score
        else:
            spec["every"] = 3600 + 60 * (i % 11)
            spec["start_at"] = start
        specs.append(spec)
    async with Client.from_settings(fast) as client:
        await client.add_many(specs)
        for sid in ("s001", "s002", "s004"):
            await client.pause(sid)
        before = listed(await everything(client, page_size=9))
        held = await lease(store)
        while await parking.park(store, held):
            pass
        assert len(await parked_ids(store)) > 100
        assert len(await parking.buckets(store.redis, store.keys)) > 5
        for size in (1, 9, 100, 500):
            assert listed(await everything(client, page_size=size)) == before
        filtered = [s.id async for s in client.iter_schedules(paused=True, page_size=2)]
        assert filtered == ["s001", "s002", "s004"]


async def test_retention_trims_the_histories_of_parked_schedules(
    fast: Settings, store: ScheduleStore
) -> None:
    await store.save(Schedule(id="a", task="t", every=3600))  # parked by the write
    assert (await where(store, "a"))[1] is not None
    old = f"{int_b62(await store.time_ms() - 400 * 86_400_000)}|f5|c2,1"
    await store.redis.rpush(store.keys.history("a"), old)
    retention = Retention(store.redis, fast, lambda: True, keys=store.keys)
    assert (await retention.sweep()).history == 1
    assert not await store.redis.exists(store.keys.history("a"))


def test_the_bucket_of_an_id_never_changes() -> None:
    # Stored layout: another bucket for the same id would leave its entry where no writer looks.
    assert parked_bucket("a") == 930
    assert Keys("rsched").parked_of("a") == "{rsched}:parked:930"
    assert Keys("rsched", 4, 2).parked_of("a").endswith(":parked:930")


async def test_with_parking_off_the_leader_brings_every_parked_schedule_back(
    fast: Settings, store: ScheduleStore
) -> None:
    async with Client.from_settings(fast) as client:
        await hourly_and_held(client)
        held = await lease(store)
        assert await parked_ids(store) == {"hourly", "held"}  # by the writes
        assert await leases(store).release(held)
        off = fast.scheduler.model_copy(update={"park": False})
        async with running(fast.model_copy(update={"scheduler": off})):
            await eventually(_nothing_parked(store))
            await anyio.sleep(0.3)  # idle: it would have parked them again by now
        assert not await parked_ids(store)
        assert await store.redis.zscore(store.keys.schedules, "held") == float("inf")
        assert await store.redis.zscore(store.keys.schedules, "hourly") is not None


def _nothing_parked(store: ScheduleStore) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return not await parked_ids(store)

    return check


async def test_a_bucket_key_of_another_type_is_left_alone(store: ScheduleStore) -> None:
    store.park_after_ms = None  # written to the index, as an earlier rsched wrote it
    await store.save(Schedule(id="a", task="t", every=3600))
    await store.redis.set(store.keys.parked_of("a"), "not rsched's")
    held = await lease(store)
    assert await parking.park(store, held) == 0
    assert await store.redis.zscore(store.keys.schedules, "a") is not None  # still in the index
    await store.redis.zadd(store.keys.parked, {str(parked_bucket("a")): 0})
    assert await parking.unpark(store, held) == (0, None)
    assert await store.redis.zcard(store.keys.parked) == 0
    assert await store.redis.get(store.keys.parked_of("a")) == "not rsched's"


async def test_a_bulk_write_parks_each_schedule_in_its_bucket_and_keeps_the_order_given(
    fast: Settings, store: ScheduleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rsched._store.schedules.BULK_WRITE", 16)  # calls of a few buckets
    ids = [f"b{i:03d}" for i in range(200)]
    # A bucket of another type refuses its schedules: they go to the index instead.
    refused = parked_bucket(ids[0])
    await store.redis.set(store.keys.parked_at(refused), "not rsched's")
    async with Client.from_settings(fast) as client:
        specs = [{"id": sid, "task": "t", "every": 3600 + i} for i, sid in enumerate(ids)]
        await client.add_many(specs)
        k = store.keys
        indexed = {str(m) for m in await store.redis.zrange(k.schedules, 0, -1)}
        assert indexed == {sid for sid in ids if parked_bucket(sid) == refused}
        assert await parked_ids(store) == set(ids) - indexed
        for sid in set(ids) - indexed:
            bound = await store.redis.zscore(k.parked, str(parked_bucket(sid)))
            score = await store.redis.zscore(k.parked_of(sid), sid)
            assert bound is not None
            assert score is not None
            assert bound <= score
        # Each call's audit record names its schedules in the order given.
        named = [sid for rec in reversed((await client.audit()).items) for sid in rec.ids]
        assert sorted(named) == ids
        for rec in (await client.audit()).items:
            assert list(rec.ids) == sorted(rec.ids)
