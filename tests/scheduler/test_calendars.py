"""Exclusion calendars and jitter through a real scheduler: excluded occurrences are recorded and
never run, a calendar's change applies from each schedule's next occurrence without touching it,
a jittered occurrence fires its delay after its time and keeps that time; and the writes that
name calendars.

A past week is replayed by staging an outage (as in test_dst_fires): the schedule's next run is
put a week back and ``misfire="catch_up"`` fires every occurrence of it at once."""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.keys import Keys
from rsched._core.schedule import to_ms
from rsched._core.settings import Settings
from rsched._core.timing import Timing
from rsched._store.schedules import ScheduleStore
from tests.support.placement import move_to
from tests.support.schedulers import jobs, quick, running
from tests.support.waiting import eventually

ROME = "Europe/Rome"


@pytest.fixture
def fast(redis_url: str, prefix: str, topology: str) -> Settings:
    return quick(redis_url, prefix, topology).model_copy(update={"history_limit": 100})


@pytest.fixture
async def client(fast: Settings) -> Any:
    async with rsched.Client.from_settings(fast) as c:
        yield c


def rome(day: int, hour: int = 9) -> int:
    """A time of January 2026 in Rome (Friday the 2nd), as ms."""
    return to_ms(datetime(2026, 1, day, hour, tzinfo=ZoneInfo(ROME)))


async def history(client: rsched.Client, sid: str) -> list[rsched.HistoryEvent]:
    return list(reversed((await client.history(sid, limit=1000)).items))


async def test_a_replayed_week_runs_only_what_no_calendar_excludes(
    client: rsched.Client, redis: Redis, fast: Settings
) -> None:
    await client.set_calendar("weekends", weekdays=["sat", "sun"])
    await client.set_calendar("epiphany", dates=["2026-01-06"], description="Befana")
    store = ScheduleStore(redis, Keys(fast.prefix))
    await client.add(
        {"id": "daily", "task": "t", "cron": "0 9 * * *", "timezone": ROME, "misfire": "catch_up",
         "overlap": "allow", "exclude": ["weekends", "epiphany"]}
    )  # fmt: skip
    await redis.hset(store.keys.schedule("daily"), "end_at", str(rome(9, 12)))
    await move_to(redis, store.keys, "daily", rome(2))  # Friday 2026-01-02, in the past
    async with running(fast):

        async def completed() -> bool:
            return (await client.get("daily")).completed

        await eventually(completed)
    fired = sorted(int(job["scheduled_at"]) for job in await jobs(store))
    assert fired == [rome(2), rome(5), rome(7), rome(8), rome(9)]
    skipped = [e for e in await history(client, "daily") if e.event == "skipped"]
    assert [
        (to_ms(e.scheduled_at), e.reason, e.extra["calendar"]) for e in skipped if e.scheduled_at
    ] == [
        (rome(3), "excluded", "weekends"),
        (rome(4), "excluded", "weekends"),
        (rome(6), "excluded", "epiphany"),
    ]
    runs = (await client.runs(schedule_id="daily", status="skipped")).items
    assert sorted((r.reason, r.error) for r in runs) == [
        ("excluded", "calendar epiphany"), ("excluded", "calendar weekends"),
        ("excluded", "calendar weekends"),
    ]  # fmt: skip
    assert (await client.get("daily")).runs == 5  # excluded occurrences are no runs


async def test_a_calendar_change_applies_from_the_next_occurrence(
    client: rsched.Client, fast: Settings
) -> None:
    await client.set_calendar("gate", dates=["2000-01-01"])  # excludes nothing now
    await client.add(
        {"id": "tick", "task": "t", "every": 0.3, "overlap": "allow", "exclude": ["gate"]}
    )
    generation = (await client.get("tick")).generation

    async def count(event: str, reason: str | None = None) -> int:
        return sum(
            1
            for e in await history(client, "tick")
            if e.event == event and (reason is None or e.reason == reason)
        )

    async with running(fast):
        await eventually(lambda: _at_least(count("fired"), 2))
        now = await client.server_time()
        await client.set_calendar(
            "gate", ranges=[(now - timedelta(hours=1), now + timedelta(hours=1))]
        )
        await eventually(lambda: _at_least(count("skipped", "excluded"), 2))
        fired_while_closed = await count("fired")
        await client.set_calendar("gate", weekdays=[])
        await eventually(lambda: _at_least(count("fired"), fired_while_closed + 2))
    assert (await client.get("tick")).generation == generation  # the schedule was not touched


async def _at_least(value: Awaitable[int], n: int) -> bool:
    return await value >= n


async def test_a_jittered_occurrence_fires_its_delay_after_its_time(
    client: rsched.Client, redis: Redis, fast: Settings
) -> None:
    await client.add({"id": "j", "task": "t", "every": 1, "jitter": "900ms", "overlap": "allow"})
    stored = await client.get("j")
    timing = Timing.of(stored)
    assert stored.next_run is not None
    first = to_ms(stored.next_run)
    assert timing.planned("j", timing.nominal("j", first)) == first

    async def fired() -> list[rsched.HistoryEvent]:
        return [e for e in await history(client, "j") if e.event == "fired"]

    async with running(fast):
        await eventually(lambda: _at_least(_len(fired()), 3))
    for e in await fired():
        assert e.scheduled_at is not None
        sched = to_ms(e.scheduled_at)
        delay = timing.delay("j", sched)
        if delay:
            assert e.extra["jitter_ms"] == delay
            assert e.jittered_at is not None
            assert to_ms(e.jittered_at) == sched + delay
        assert to_ms(e.at) >= sched + delay  # never before its delay
        assert e.late_ms is not None
        assert e.late_ms < 1000
    grid = {int(job["scheduled_at"]) for job in await jobs(ScheduleStore(redis, Keys(fast.prefix)))}
    anchor = to_ms(stored.created_at or datetime.now(UTC)) + 1000
    assert all((t - anchor) % 1000 == 0 for t in grid)  # jobs keep the occurrence's time


async def _len(value: Awaitable[list[rsched.HistoryEvent]]) -> int:
    return len(await value)


async def test_writes_naming_a_missing_calendar_are_refused(client: rsched.Client) -> None:
    with pytest.raises(rsched.InvalidSchedule) as err:
        await client.add({"id": "a", "task": "t", "every": 60, "exclude": ["nope"]})
    assert err.value.errors[0][0] == "exclude"
    assert "'nope'" in err.value.errors[0][1]
    with pytest.raises(rsched.InvalidSchedules) as many:
        await client.add_many(
            [
                {"id": "b", "task": "t", "every": 60},
                {"id": "c", "task": "t", "every": 60, "exclude": ["nope"]},
            ]
        )
    assert [(p[1], p[2]) for p in many.value.problems] == [("c", "exclude")]
    assert not (await client.list()).items  # nothing written
    await client.set_calendar("nope", dates=["2030-01-01"])
    await client.add({"id": "a", "task": "t", "every": 60, "exclude": ["nope"]})
    await client.update("a", jitter="5s")
    assert (await client.get("a")).exclude == ("nope",)


async def test_a_calendar_in_use_is_not_removed(client: rsched.Client) -> None:
    await client.set_calendar("hol", dates=["2030-12-25"])
    for sid in ("x", "y"):
        await client.add({"id": sid, "task": "t", "cron": "0 9 * * *", "exclude": ["hol"]})
    await client.pause("y")  # a paused schedule (parked) still uses it
    with pytest.raises(rsched.CalendarInUse) as err:
        await client.remove_calendar("hol")
    assert "x" in str(err.value)
    assert "y" in str(err.value)
    assert (await client.calendar("hol")).dates
    await client.update("x", exclude=[])
    await client.remove("y")
    await client.remove_calendar("hol")
    with pytest.raises(rsched.CalendarNotFound):
        await client.calendar("hol")
    with pytest.raises(rsched.CalendarNotFound):
        await client.remove_calendar("hol")


async def test_calendars_are_stored_listed_and_validated(client: rsched.Client) -> None:
    before = await client.server_time()
    c = await client.set_calendar(
        "mixed", dates=["2027-12-25", "2027-12-24"], ranges=["2027-08-10..2027-08-20"],
        weekdays=["Sunday"], description="closures",
    )  # fmt: skip
    assert c.updated_at is not None
    assert c.updated_at >= before - timedelta(seconds=1)
    assert [d.isoformat() for d in c.dates] == ["2027-12-24", "2027-12-25"]
    assert c.weekdays == ("sun",)
    assert [x.name for x in await client.calendars()] == ["mixed"]
    assert (await client.calendar("mixed")).as_dict() == c.as_dict()
    with pytest.raises(rsched.InvalidCalendar) as err:
        await client.set_calendar("mixed", dates=["2027-02-30"], weekdays=["someday"])
    fields = [f for f, _ in err.value.errors]
    assert any(f.startswith("dates") for f in fields)
    assert any(f.startswith("weekdays") for f in fields)
    assert (await client.calendar("mixed")).as_dict() == c.as_dict()  # nothing written


async def test_previews_leave_excluded_occurrences_out(client: rsched.Client) -> None:
    await client.set_calendar("all-days", weekdays=["mon", "tue", "wed", "thu", "fri", "sat"])
    await client.add(
        {"id": "p", "task": "t", "cron": "0 9 * * *", "timezone": ROME, "exclude": ["all-days"]}
    )
    times = await client.next_runs("p", 3)
    assert [t.strftime("%a") for t in times] == ["Sun"] * 3
    marked = await client.upcoming("p", 7, with_excluded=True)
    assert sum(1 for o in marked if o.excluded_by == "all-days") == 6
