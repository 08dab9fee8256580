"""Jitter and exclusion calendars as pure functions: each occurrence's delay, the fire items a
scheduler sends for a jittered or excluded occurrence, and the previews."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

import rsched
from rsched._core.calendars import Calendar
from rsched._core.fire_plan import PlannedSpec, plan
from rsched._core.schedule import to_ms
from rsched._core.timing import Timing, first_run_ms, upcoming

MIN = 60_000
T0 = 1_800_000_000_000 - 1_800_000_000_000 % MIN  # a whole minute
ROME = ZoneInfo("Europe/Rome")


def hourly(**kw: object) -> Timing:
    return Timing.of(rsched.Schedule(id="h", task="t", cron="0 * * * *", **kw))


def test_jitter_spreads_a_herd_evenly_and_is_the_same_every_time() -> None:
    """10,000 schedules on one cron with jitter 60s: no 1-second bucket holds more than twice
    the mean, and every scheduler (every call) computes the same delays."""
    timing = Timing(tz=ROME, every_ms=3_600_000, anchor_ms=T0, jitter_ms=60_000)
    delays = [timing.delay(f"s{i}", T0) for i in range(10_000)]
    assert all(0 <= d < 60_000 for d in delays)
    buckets = Counter(d // 1000 for d in delays)
    assert len(buckets) == 60
    assert max(buckets.values()) <= 2 * 10_000 / 60
    assert delays == [timing.delay(f"s{i}", T0) for i in range(10_000)]


def test_a_delay_stays_short_of_the_next_occurrence() -> None:
    timing = Timing(tz=ROME, every_ms=10_000, anchor_ms=T0, jitter_ms=3_600_000)
    for n in range(200):
        at = T0 + n * 10_000
        planned = timing.planned("s", at)
        assert planned is not None
        assert at <= planned < at + 10_000
        assert timing.nominal("s", planned) == at


def test_without_a_jitter_nothing_moves() -> None:
    timing = hourly()
    assert timing.delay("h", T0) == 0
    assert timing.planned("h", T0) == T0
    assert timing.nominal("h", T0 + 5) == T0 + 5


def test_a_jittered_occurrence_fires_at_its_delay_with_its_time_kept() -> None:
    timing = hourly(jitter="5m")
    sched = T0 - T0 % 3_600_000 + 3_600_000
    due = timing.planned("h", sched)
    assert due is not None
    assert sched <= due < sched + 300_000
    spec = PlannedSpec(version="1:0", timing=timing)
    (item,) = plan("h", spec, due, due + 10)
    assert (item.action, item.expect, item.sched) == ("fire", due, sched)
    assert item.next == timing.planned("h", sched + 3_600_000)
    # Another schedule of the same cron fires at its own delay.
    assert timing.planned("other", sched) != due or timing.delay("other", sched) == 0
    header = item.header(1)
    assert header.split()[3:] == [str(sched), "fire", "0"]  # the long form: sched != expect


def test_the_first_run_of_a_jittered_schedule_is_its_own() -> None:
    now = T0 + 1
    a = rsched.Schedule(
        id="a", task="t", every=60, jitter=30, start_at=datetime.fromtimestamp(T0 / 1000, UTC)
    )
    first_a = first_run_ms(a, now)
    first_b = first_run_ms(a, now, schedule_id="b")
    assert first_a is not None
    assert T0 + MIN <= first_a < T0 + MIN + 30_000
    assert first_a == Timing.of(a).planned("a", T0 + MIN)
    assert first_b == Timing.of(a).planned("b", T0 + MIN)


def weekdays_off() -> Calendar:
    return Calendar.build("weekends", weekdays=["sat", "sun"])


def excluding_weekends(ms: int) -> str | None:
    return "weekends" if weekdays_off().excludes(ms, ROME) else None


def test_an_excluded_occurrence_is_recorded_not_run() -> None:
    saturday = to_ms(datetime(2027, 1, 2, 9, tzinfo=ROME))
    timing = Timing.of(rsched.Schedule(id="d", task="t", cron="0 9 * * *", timezone="Europe/Rome"))
    spec = PlannedSpec(version="1:0", timing=timing, exclude=("weekends",))
    (item,) = plan("d", spec, saturday, saturday + 5, excluding_weekends)
    assert (item.action, item.sched, item.calendar) == ("exclude", saturday, "weekends")
    assert item.next == saturday + 86_400_000
    assert item.header(1).endswith(" exclude weekends")
    monday = saturday + 2 * 86_400_000
    (item,) = plan("d", spec, monday, monday + 5, excluding_weekends)
    assert item.action == "fire"


def test_misfire_policies_leave_excluded_occurrences_out() -> None:
    friday = to_ms(datetime(2027, 1, 1, 9, tzinfo=ROME))
    timing = Timing.of(rsched.Schedule(id="d", task="t", cron="0 9 * * *", timezone="Europe/Rome"))
    day = 86_400_000
    now = friday + 2 * day + 3_600_000  # Sunday 10:00: Friday, Saturday and Sunday missed
    run_once = PlannedSpec(version="1:0", timing=timing)
    (item,) = plan("d", run_once, friday, now, excluding_weekends)
    assert (item.action, item.sched, item.missed) == ("misfire", friday, 3)  # not the Sunday
    (item,) = plan("d", run_once, friday + day, now, excluding_weekends)
    assert (item.action, item.sched, item.next) == ("exclude", friday + day, friday + 3 * day)
    catch_up = PlannedSpec(version="1:0", timing=timing, misfire="catch_up")
    items = plan("d", catch_up, friday, now, excluding_weekends)
    assert [(i.action, i.sched) for i in items] == [
        ("catch_up", friday), ("exclude", friday + day), ("exclude", friday + 2 * day),
    ]  # fmt: skip
    assert items[-1].next == friday + 3 * day


def test_previews_leave_excluded_occurrences_out_or_mark_them() -> None:
    s = rsched.Schedule(
        id="d", task="t", cron="0 9 * * *", timezone="Europe/Rome", exclude=["weekends"]
    )
    friday_night = datetime(2027, 1, 1, 20, tzinfo=ROME)
    times = rsched.next_fire_times(s, friday_night, 3, [weekdays_off()])
    assert [t.day for t in times] == [4, 5, 6]
    marked = upcoming(s, to_ms(friday_night), 3, [weekdays_off()], with_excluded=True)
    assert [u.excluded_by for u in marked] == ["weekends", "weekends", None]
    # Excluded occurrences are not runs: max_runs counts only what runs.
    limited = s.model_copy(update={"max_runs": 2})
    assert len(rsched.next_fire_times(limited, friday_night, 5, [weekdays_off()])) == 2


def test_previews_show_when_a_jittered_occurrence_fires() -> None:
    s = rsched.Schedule(id="j", task="t", cron="0 9 * * *", timezone="Europe/Rome", jitter="10m")
    after = datetime(2027, 1, 1, 10, tzinfo=ROME)
    (u,) = upcoming(s, to_ms(after), 1)
    assert u.fires_at == Timing.of(s).planned("j", u.at)
    assert rsched.next_fire_times(s, after, 1)[0] == datetime.fromtimestamp(u.fires_at / 1000, ROME)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0.0001", "shorter than 1ms"),
        ("0s", "is zero"),
        ("8d", "longer than 7 days"),
        ("soon", "not a duration"),
    ],
)
def test_a_bad_jitter_names_the_field(value: str, message: str) -> None:
    with pytest.raises(rsched.InvalidSchedule) as err:
        rsched.Schedule(id="j", task="t", every=60, jitter=value)
    assert err.value.errors[0][0] == "jitter"
    assert message in err.value.errors[0][1]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["a b"], "not a valid calendar name"),
        (["a", "a"], "named twice"),
        ([f"c{i}" for i in range(21)], "over the limit of 20"),
        (5, "give a list of calendar names"),
    ],
)
def test_a_bad_exclude_names_the_field(value: object, message: str) -> None:
    with pytest.raises(rsched.InvalidSchedule) as err:
        rsched.Schedule(id="j", task="t", every=60, exclude=value)
    assert err.value.errors[0][0] == "exclude"
    assert message in err.value.errors[0][1]


def test_exclude_and_jitter_are_stored_and_read_back() -> None:
    s = rsched.Schedule(id="j", task="t", every=60, exclude=["a", "b"], jitter="90s")
    fields = s.spec_fields()
    assert (fields["exclude"], fields["jitter"]) == ("a,b", "90")
    back = rsched.Schedule.from_hash("j", {**fields, "version": "1:1"})
    assert (back.exclude, back.jitter) == (("a", "b"), 90.0)
    spec = PlannedSpec.from_hash({**fields, "version": "1:1"})
    assert spec.exclude == ("a", "b")
    assert spec.timing.jitter_ms == 90_000


def test_a_preview_ends_when_every_occurrence_is_excluded() -> None:
    every_day = Calendar.build("all", weekdays=["mon", "tue", "wed", "thu", "fri", "sat", "sun"])
    s = rsched.Schedule(id="d", task="t", cron="0 9 * * *", exclude=["all"])
    assert rsched.next_fire_times(s, datetime(2027, 1, 1, tzinfo=UTC), 3, [every_day]) == []
