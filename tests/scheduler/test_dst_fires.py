"""A scheduler fires what a schedule's DST rule says, across real transitions: its planner reads
``dst_gap`` / ``dst_fold`` with the other fields it plans with, and each next run it stores
follows them.

Nothing here controls time: an outage is staged instead. Each schedule's next run is put just
before a past transition (New York, 2024) and its window closed a day after it (``end_at``,
written by hand, as a schedule that existed then would have it); ``misfire="catch_up"`` with
``overlap="allow"`` then fires every occurrence of that window at once, each one's next run
computed by the planner from the one before, until the schedule completes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from redis.asyncio import Redis

from rsched import Schedule
from rsched._core.keys import Keys
from rsched._core.schedule import to_ms
from rsched._core.settings import Settings
from rsched._core.timing import Timing
from rsched._store.schedules import ScheduleStore
from tests.support.placement import move_to
from tests.support.schedulers import jobs, quick, running
from tests.support.waiting import eventually

NY = "America/New_York"


@pytest.fixture
def fast(redis_url: str, prefix: str, topology: str) -> Settings:
    return quick(redis_url, prefix, topology)


@pytest.fixture
def store(redis: Redis, fast: Settings) -> ScheduleStore:
    return ScheduleStore(redis, Keys(fast.prefix))


def ms(utc: str) -> int:
    return to_ms(datetime.fromisoformat(utc).replace(tzinfo=UTC))


async def fired_in_window(
    store: ScheduleStore, fast: Settings, first: str, end: str, **spec: Any
) -> dict[str, list[int]]:
    """Each schedule's fired occurrences (scheduled_at, ms) from ``first`` to ``end``."""
    ids = list(spec)
    for sid, fields in spec.items():
        await store.save(
            Schedule(id=sid, task="t", timezone=NY, misfire="catch_up", overlap="allow", **fields)
        )
        await store.redis.hset(store.keys.schedule(sid), "end_at", str(ms(end)))
        await move_to(store.redis, store.keys, sid, ms(first))
    async with running(fast):

        async def completed() -> bool:
            return all([(await store.load(sid)).completed for sid in ids])

        await eventually(completed)
    out: dict[str, list[int]] = {sid: [] for sid in ids}
    for job in await jobs(store):
        out[job["schedule_id"]].append(int(job["scheduled_at"]))
    return out


async def test_skip_and_shift_across_spring_forward(store: ScheduleStore, fast: Settings) -> None:
    # 2024-03-10 02:00 EST -> 03:00 EDT: 02:30 does not exist that day.
    fired = await fired_in_window(
        store,
        fast,
        "2024-03-09T07:30",  # 02:30 EST
        "2024-03-11T12:00",
        skip={"cron": "30 2 * * *", "dst_gap": "skip"},
        cron={"cron": "30 2 * * *"},  # cron's rule: shift
        steps={"cron": "30 * * * *", "dst_gap": "shift"},  # '*' skips unless told to shift
    )
    assert fired["skip"] == [ms("2024-03-09T07:30"), ms("2024-03-11T06:30")]
    assert fired["cron"] == [
        ms("2024-03-09T07:30"),
        ms("2024-03-10T07:00"),  # 03:00 EDT, the first instant after the gap
        ms("2024-03-11T06:30"),
    ]
    steps = fired["steps"]
    assert ms("2024-03-10T07:00") in steps  # 02:30 shifted to 03:00 EDT
    assert ms("2024-03-10T07:30") in steps  # and 03:30 EDT as usual
    # The scheduler fires what the pure computation says (its window included).
    assert steps == Timing.of(await store.load("steps")).between(steps[0], ms("2030-01-01"), 100)
    assert len(steps) == 22 + 24 + 8  # 03-09 from 02:30, 03-10 (one shifted), 03-11 to 07:30


async def test_both_passes_across_fall_back(store: ScheduleStore, fast: Settings) -> None:
    # 2024-11-03 02:00 EDT -> 01:00 EST: 01:30 happens twice.
    fired = await fired_in_window(
        store,
        fast,
        "2024-11-02T05:30",  # 01:30 EDT
        "2024-11-04T12:00",
        both={"cron": "30 1 * * *", "dst_fold": "both"},
        last={"cron": "30 1 * * *", "dst_fold": "last"},
        cron={"cron": "30 1 * * *"},  # cron's rule: first
    )
    before, first_pass, second_pass, after = (
        ms("2024-11-02T05:30"),
        ms("2024-11-03T05:30"),  # 01:30 EDT
        ms("2024-11-03T06:30"),  # 01:30 EST
        ms("2024-11-04T06:30"),
    )
    assert fired["both"] == [before, first_pass, second_pass, after]
    assert fired["last"] == [before, second_pass, after]
    assert fired["cron"] == [before, first_pass, after]


async def test_the_stored_next_run_follows_the_rule(store: ScheduleStore) -> None:
    # What a write stores as the next run, and what an update of the rule makes of it.
    await store.save(Schedule(id="n", task="t", cron="0 0 * * *", timezone="America/Santiago"))
    plain = await store.load("n")
    chosen = plain.model_copy(update={"dst_gap": "skip", "dst_fold": "last"})
    await store.save(chosen)
    loaded = await store.load("n")
    assert (loaded.dst_gap, loaded.dst_fold) == ("skip", "last")
    fields = (await store.fields(["n"]))[0]
    assert (fields["dst_gap"], fields["dst_fold"]) == ("skip", "last")
    assert loaded.next_run is not None
    assert loaded.generation == plain.generation + 1
