"""DST tables through the public ``rsched.next_fire_times`` (Debian/Vixie cron rules)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from rsched import Schedule, next_fire_times


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(cron: str, zone: str, after_utc: str, n: int) -> list[str]:
    schedule = Schedule(id="d", task="t", cron=cron, timezone=zone)
    return [t.isoformat() for t in next_fire_times(schedule, utc(after_utc), n)]


@pytest.mark.parametrize(
    ("cron", "zone", "after_utc", "expected"),
    [
        # Spring forward, New York 2026-03-08 02:00 EST -> 03:00 EDT: 02:30 does not exist, the
        # fixed-time job fires once at the first valid instant after the gap.
        (
            "30 2 * * *",
            "America/New_York",
            "2026-03-07T00:00",
            ["2026-03-07T02:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
        ),
        # Fall back, New York 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 happens twice, the job
        # fires at the first one only.
        (
            "30 1 * * *",
            "America/New_York",
            "2026-10-31T00:00",
            ["2026-10-31T01:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
        ),
        # Lord Howe shifts by 30 minutes: 2026-10-04 02:00 LHST -> 02:30 LHDT.
        (
            "15 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-02T00:00",
            [
                "2026-10-03T02:15:00+10:30",
                "2026-10-04T02:30:00+11:00",
                "2026-10-05T02:15:00+11:00",
            ],
        ),
        # ... and back on 2026-04-05 02:00 LHDT -> 01:30 LHST: 01:45 happens twice, fires once.
        (
            "45 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-03T00:00",
            [
                "2026-04-04T01:45:00+11:00",
                "2026-04-05T01:45:00+11:00",
                "2026-04-06T01:45:00+10:30",
            ],
        ),
        # No DST at all: the same wall time every day.
        (
            "30 2 * * *",
            "Asia/Tokyo",
            "2026-03-06T00:00",
            ["2026-03-07T02:30:00+09:00", "2026-03-08T02:30:00+09:00", "2026-03-09T02:30:00+09:00"],
        ),
        # Europe: Berlin 2026-03-29 02:00 CET -> 03:00 CEST; London 2026-10-25 02:00 BST -> GMT.
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-27T12:00",
            ["2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
        ),
        (
            "30 1 * * *",
            "Europe/London",
            "2026-10-24T12:00",
            ["2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00+00:00"],
        ),
    ],
)
def test_fixed_times(cron: str, zone: str, after_utc: str, expected: list[str]) -> None:
    assert fires(cron, zone, after_utc, len(expected)) == expected


def test_steps_follow_elapsed_time_through_fall_back() -> None:
    # */30 in the repeated hour fires in both passes: real elapsed time, every 30 minutes.
    got = fires("*/30 * * * *", "America/New_York", "2026-11-01T04:45", 6)
    instants = [datetime.fromisoformat(t) for t in got]
    assert [b - a for a, b in itertools.pairwise(instants)] == [timedelta(minutes=30)] * 5
    assert got[:4] == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:30:00-05:00",
    ]


def test_steps_skip_the_gap_on_spring_forward() -> None:
    got = fires("0 * * * *", "Europe/Berlin", "2026-03-29T00:30", 3)
    assert got == [
        "2026-03-29T03:00:00+02:00",  # 02:00 CET never happens
        "2026-03-29T04:00:00+02:00",
        "2026-03-29T05:00:00+02:00",
    ]


def test_every_ignores_dst() -> None:
    start = datetime(2026, 3, 8, 1, 0, tzinfo=ZoneInfo("America/New_York"))
    schedule = Schedule(id="e", task="t", every=3600, start_at=start, timezone="America/New_York")
    got = next_fire_times(schedule, start - timedelta(seconds=1), 3)
    assert [t.isoformat() for t in got] == [
        "2026-03-08T01:00:00-05:00",
        "2026-03-08T03:00:00-04:00",  # one elapsed hour later
        "2026-03-08T04:00:00-04:00",
    ]


def test_max_runs_end_at_and_completion_limit_the_preview() -> None:
    after = utc("2026-01-01T00:00")
    limited = Schedule(id="m", task="t", cron="0 * * * *", max_runs=5, runs=3)
    assert len(next_fire_times(limited, after, 10)) == 2
    ended = Schedule(id="m", task="t", cron="0 * * * *", end_at=utc("2026-01-01T03:00"))
    assert [t.hour for t in next_fire_times(ended, after, 10)] == [1, 2, 3]
    done = Schedule(id="m", task="t", cron="0 * * * *", completed=True)
    assert next_fire_times(done, after, 3) == []
    once = Schedule(id="o", task="t", at=utc("2026-01-01T05:00"))
    assert len(next_fire_times(once, after, 3)) == 1
