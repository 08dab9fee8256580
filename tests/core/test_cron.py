"""Cron parsing and DST-correct evaluation (pure time arithmetic, no Redis)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from zoneinfo import ZoneInfo

import pytest

from rsched._core.cron import Cron, _cached

NY = "America/New_York"
LH = "Australia/Lord_Howe"
ROME = "Europe/Rome"


def _local(zone: str, naive: str, fold: int = 0) -> datetime:
    """An aware datetime from a naive ISO string read in `zone`."""
    return datetime.fromisoformat(naive).replace(tzinfo=ZoneInfo(zone), fold=fold)


def _run(expr: str, zone: str, start: datetime, count: int) -> list[str]:
    """The next `count` firings after `start`, as ISO strings with offsets."""
    cron, tz = Cron.parse(expr), ZoneInfo(zone)
    out: list[str] = []
    moment: datetime | None = start
    for _ in range(count):
        assert moment is not None
        moment = cron.next_after(moment, tz)
        assert moment is not None
        out.append(moment.isoformat())
    return out


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "fields", "fixed"),
    [
        ("@daily", "0 0 0 * * *", True),
        ("@midnight", "0 0 0 * * *", True),
        ("@DAILY", "0 0 0 * * *", True),
        ("@hourly", "0 0 * * * *", False),
        ("@weekly", "0 0 0 * * 0", True),
        ("@monthly", "0 0 0 1 * *", True),
        ("@yearly", "0 0 0 1 1 *", True),
        ("@annually", "0 0 0 1 1 *", True),
        ("  */5 * * * *  ", "0 */5 * * * *", False),
        ("0 9 * jan-mar mon-fri", "0 0 9 * JAN-MAR MON-FRI", True),
        ("0 8,12 * * *", "0 0 8,12 * * *", True),
        ("0 0-30 9-17 * * *", "0 0-30 9-17 * * *", True),
        ("0 0 1-23/2 * * *", "0 0 1-23/2 * * *", False),
        ("15 30 2 * * *", "15 30 2 * * *", True),
        ("*/10 30 2 * * *", "*/10 30 2 * * *", False),
        ("0 0 29 2 *", "0 0 0 29 2 *", True),
        ("0 0 L,LW * *", "0 0 0 L,LW * *", True),
        ("0 0 * * 5L,MON#2", "0 0 0 * * 5L,MON#2", True),
        ("0 0 * 2 MON#5", "0 0 0 * 2 MON#5", True),
    ],
)
def test_parse_normalizes(text: str, fields: str, fixed: bool) -> None:
    cron = Cron.parse(text)
    assert (cron.text, cron.fields, cron.fixed) == (text.strip(), fields, fixed)


def test_parse_is_cached_and_hashable() -> None:
    assert Cron.parse("@daily") is Cron.parse("@daily")
    assert len({Cron.parse("0 0 * * *"), Cron.parse("0 0 * * *")}) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "cron expression is empty"),
        ("* * * *", "has 4 fields; use 5 fields (minute hour day-of-month month day-of-week)"),
        ("0 0 * * * * 2026", "has 7 fields (a year field is not supported)"),
        ("@reboot", "@reboot is not supported"),
        ("@fortnightly", "unknown shortcut; use one of @yearly"),
        ("0 0 30 2 *", "day-of-month 30 never occurs in February, so the expression can never"),
        ("0 0 31 2,4 *", "day-of-month 31 never occurs in February or April"),
        ("0 0 30,31 FEB *", "day-of-month 30,31 never occurs in February"),
        ("0 0 */15 2 MON#5", "can never fire"),
        ("*/0 * * * *", "minute step must be at least 1"),
        ("*/x * * * *", "minute step must be a whole number"),
        ("61 * * * *", "minute must be 0-59"),
        ("60 * * * * *", "second must be 0-59"),
        ("0 24 * * *", "hour must be 0-23"),
        ("0 0 0 * *", "day-of-month must be 1-31"),
        ("0 0 32 * *", "day-of-month must be 1-31"),
        ("0 0 1 13 *", "month must be 1-12 or JAN-DEC"),
        ("0 0 1 MON *", "month must be 1-12 or JAN-DEC, got 'MON'"),
        ("0 0 * * 8", "day-of-week must be 0-7 or SUN-SAT"),
        ("0 0 * * JAN", "day-of-week must be 0-7 or SUN-SAT"),
        ("30-10 * * * *", "minute range '30-10' runs backwards"),
        ("1,,2 * * * *", "minute has an empty list item"),
        ("0 0 * * MON#6", "day-of-week occurrence in 'MON#6' must be 1-5"),
        ("0 0 * * L", "day-of-week 'L': put a weekday number 0-7 before L"),
        ("0 0 * * FRIL", "put a weekday number 0-7 before L"),
        ("0 0 L-2 * *", "day-of-month 'L-2': L cannot be combined"),
        ("0 0 15W * *", "nearest-weekday form"),
        ("0 0 ? * MON", "'?' is not supported in the day-of-month field"),
        ("5#2 * * * *", "'#' is only allowed in the day-of-week field"),
        ("0 -1 * * *", "hour must be 0-23"),
    ],
)
def test_parse_errors_name_the_field(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="cron") as info:
        Cron.parse(text)
    assert message in str(info.value)


def test_error_quotes_the_expression() -> None:
    with pytest.raises(ValueError, match=r"^cron '61 \* \* \* \*': minute must be 0-59"):
        Cron.parse("61 * * * *")


# --------------------------------------------------------------------------- DST tables

DST_CASES: list[tuple[str, str, str, int, list[str]]] = [
    # America/New_York spring forward 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z).
    # Fixed: a gap time fires once, at the transition instant.
    (
        "30 2 * * *",
        NY,
        "2026-03-08T00:00",
        0,
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
    ),
    ("15 30 2 * * *", NY, "2026-03-08T00:00", 0, ["2026-03-08T03:00:00-04:00"]),
    (
        "0,30 2 * * *",
        NY,
        "2026-03-08T00:00",
        0,
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"],
    ),
    (
        "30 2,3 * * *",
        NY,
        "2026-03-08T00:00",
        0,
        ["2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"],
    ),
    ("30 1 * * *", NY, "2026-03-08T00:00", 0, ["2026-03-08T01:30:00-05:00"]),
    # Elapsed: wall times inside the gap do not exist.
    (
        "0 */1 * * *",
        NY,
        "2026-03-08T00:30",
        0,
        ["2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"],
    ),
    (
        "*/30 * * * *",
        NY,
        "2026-03-08T01:30",
        0,
        ["2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"],
    ),
    ("*/30 2 * * *", NY, "2026-03-08T00:00", 0, ["2026-03-09T02:00:00-04:00"]),
    # America/New_York fall back 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z).
    # Fixed: a repeated time fires once, at its first occurrence.
    (
        "30 1 * * *",
        NY,
        "2026-11-01T00:00",
        0,
        ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
    ),
    # ... even when asked from inside the second pass of the repeated hour.
    ("30 1 * * *", NY, "2026-11-01T01:10", 1, ["2026-11-02T01:30:00-05:00"]),
    ("0 2 * * *", NY, "2026-11-01T01:30", 1, ["2026-11-01T02:00:00-05:00"]),
    (
        "0 1,2 * * *",
        NY,
        "2026-11-01T00:30",
        0,
        ["2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00"],
    ),
    # Elapsed: both passes fire.
    (
        "*/15 * * * *",
        NY,
        "2026-11-01T00:50",
        0,
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:15:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:45:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:15:00-05:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-01T01:45:00-05:00",
            "2026-11-01T02:00:00-05:00",
        ],
    ),
    (
        "@hourly",
        NY,
        "2026-11-01T00:30",
        0,
        ["2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"],
    ),
    (
        "*/20 * * * * *",
        NY,
        "2026-11-01T01:59:50",
        0,
        ["2026-11-01T01:00:00-05:00", "2026-11-01T01:00:20-05:00"],
    ),
    # Australia/Lord_Howe: 30-minute shifts. Fall back 2026-04-05 02:00 LHDT -> 01:30 LHST
    # (15:00Z on 04-04); spring forward 2026-10-04 02:00 LHST -> 02:30 LHDT (15:30Z on 10-03).
    (
        "15 2 * * *",
        LH,
        "2026-10-04T00:00",
        0,
        ["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
    ),
    ("15 0 2 * * *", LH, "2026-10-04T00:00", 0, ["2026-10-04T02:30:00+11:00"]),
    ("45 2 * * *", LH, "2026-10-04T00:00", 0, ["2026-10-04T02:45:00+11:00"]),
    (
        "45 1 * * *",
        LH,
        "2026-04-05T00:00",
        0,
        ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
    ),
    # cronsim with aware datetimes returns 03:30 here, skipping 03:00-03:20.
    (
        "*/10 3 * * *",
        LH,
        "2026-10-04T01:50",
        0,
        ["2026-10-04T03:00:00+11:00", "2026-10-04T03:10:00+11:00"],
    ),
    (
        "*/20 1 * * *",
        LH,
        "2026-04-05T01:10",
        0,
        [
            "2026-04-05T01:20:00+11:00",
            "2026-04-05T01:40:00+11:00",
            "2026-04-05T01:40:00+10:30",
            "2026-04-06T01:00:00+10:30",
        ],
    ),
    (
        "0 * * * *",
        LH,
        "2026-04-05T00:30",
        0,
        ["2026-04-05T01:00:00+11:00", "2026-04-05T02:00:00+10:30"],
    ),
    # Europe/Rome: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
    ("30 2 * * *", ROME, "2026-03-29T00:00", 0, ["2026-03-29T03:00:00+02:00"]),
    (
        "30 2 * * *",
        ROME,
        "2026-10-25T00:00",
        0,
        ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
    ),
    (
        "*/30 * * * *",
        ROME,
        "2026-10-25T02:40",
        0,
        ["2026-10-25T02:00:00+01:00", "2026-10-25T02:30:00+01:00", "2026-10-25T03:00:00+01:00"],
    ),
    # No DST.
    (
        "30 2 * * *",
        "Asia/Kolkata",
        "2026-03-08T00:00",
        0,
        ["2026-03-08T02:30:00+05:30", "2026-03-09T02:30:00+05:30"],
    ),
    ("0 9 * * MON-FRI", "Asia/Tokyo", "2026-05-08T10:00", 0, ["2026-05-11T09:00:00+09:00"]),
    (
        "*/5 * * * *",
        "UTC",
        "2026-12-31T23:57:30",
        0,
        ["2027-01-01T00:00:00+00:00", "2027-01-01T00:05:00+00:00"],
    ),
]


@pytest.mark.parametrize(("expr", "zone", "start", "fold", "expected"), DST_CASES)
def test_next_after_dst(expr: str, zone: str, start: str, fold: int, expected: list[str]) -> None:
    assert _run(expr, zone, _local(zone, start, fold), len(expected)) == expected


@pytest.mark.parametrize(
    ("expr", "zone", "at", "fold", "expected"),
    [
        # Second pass of the repeated hour: the first-pass 01:30 EDT already fired.
        ("30 1 * * *", NY, "2026-11-01T01:10", 1, "2026-11-01T01:30:00-04:00"),
        ("30 1 * * *", NY, "2026-11-01T01:10", 0, "2026-10-31T01:30:00-04:00"),
        ("30 2 * * *", NY, "2026-03-08T03:00", 0, "2026-03-08T03:00:00-04:00"),
        ("30 2 * * *", NY, "2026-03-08T04:00", 0, "2026-03-08T03:00:00-04:00"),
        ("*/15 * * * *", NY, "2026-11-01T01:10", 1, "2026-11-01T01:00:00-05:00"),
        ("*/15 * * * *", NY, "2026-11-01T01:59", 0, "2026-11-01T01:45:00-04:00"),
        ("0 * * * *", NY, "2026-03-08T03:30", 0, "2026-03-08T03:00:00-04:00"),
        ("*/10 3 * * *", LH, "2026-10-04T03:05", 0, "2026-10-04T03:00:00+11:00"),
        ("15 2 * * *", LH, "2026-10-04T02:40", 0, "2026-10-04T02:30:00+11:00"),
        ("0 0 * * *", "UTC", "2026-05-05T00:00", 0, "2026-05-05T00:00:00+00:00"),
    ],
)
def test_prev_at_or_before(expr: str, zone: str, at: str, fold: int, expected: str) -> None:
    found = Cron.parse(expr).prev_at_or_before(_local(zone, at, fold), ZoneInfo(zone))
    assert found is not None
    assert found.isoformat() == expected


# --------------------------------------------------------------------------- day fields


@pytest.mark.parametrize(
    ("expr", "start", "expected"),
    [
        ("0 0 L * *", "2026-02-01", ["2026-02-28", "2026-03-31"]),
        ("0 0 L 2 *", "2027-03-01", ["2028-02-29"]),
        ("0 0 LW * *", "2026-05-01", ["2026-05-29", "2026-06-30"]),
        ("0 0 * * 5L", "2026-05-01", ["2026-05-29", "2026-06-26"]),
        ("0 0 * * MON#2", "2026-05-01", ["2026-05-11", "2026-06-08"]),
        ("0 0 * 2 MON#5", "2017-01-01", ["2044-02-29"]),
        ("0 0 29 2 *", "2026-01-01", ["2028-02-29", "2032-02-29"]),
        ("0 0 13 * FRI", "2026-02-01", ["2026-02-06", "2026-02-13"]),
        ("0 0 * * 7", "2026-05-01", ["2026-05-03"]),
        ("@weekly", "2026-05-01", ["2026-05-03"]),
        ("@monthly", "2026-05-01", ["2026-06-01"]),
        ("@yearly", "2026-05-01", ["2027-01-01"]),
        ("0 0 1 jan,Jul *", "2026-05-01", ["2026-07-01", "2027-01-01"]),
    ],
)
def test_day_fields(expr: str, start: str, expected: list[str]) -> None:
    got = _run(expr, "UTC", _local("UTC", start), len(expected))
    assert got == [f"{day}T00:00:00+00:00" for day in expected]


# --------------------------------------------------------------------------- properties


# Eight-hour UTC windows around each 2026 transition.
WINDOWS = [
    (NY, "2026-03-08T04:00"),
    (NY, "2026-11-01T03:00"),
    (LH, "2026-04-04T12:00"),
    (LH, "2026-10-03T12:00"),
    (ROME, "2026-03-28T22:00"),
    (ROME, "2026-10-24T22:00"),
]


def _brute(
    zone: str, start: datetime, minutes: int, match: Callable[[datetime], bool]
) -> list[str]:
    """Every whole minute in the window whose local reading matches (elapsed semantics)."""
    tz = ZoneInfo(zone)
    moments = (start + timedelta(minutes=i) for i in range(minutes))
    return [m.astimezone(tz).isoformat() for m in moments if match(m.astimezone(tz))]


@pytest.mark.parametrize(
    ("expr", "match"),
    [
        ("*/10 * * * *", lambda d: d.minute % 10 == 0),
        ("*/20 1-3 * * *", lambda d: d.minute % 20 == 0 and 1 <= d.hour <= 3),
        ("0 * * * *", lambda d: d.minute == 0),
        ("45 */2 * * *", lambda d: d.minute == 45 and d.hour % 2 == 0),
    ],
)
@pytest.mark.parametrize(("zone", "start_utc"), WINDOWS)
def test_elapsed_matches_brute_force(
    expr: str, match: Callable[[datetime], bool], zone: str, start_utc: str
) -> None:
    start = datetime.fromisoformat(start_utc).replace(tzinfo=UTC)
    expected = _brute(zone, start, 8 * 60, match)
    assert _firings(expr, zone, start, start + timedelta(hours=8)) == expected


def _debian_brute(
    zone: str, start: datetime, minutes: int, match: Callable[[datetime], bool]
) -> list[str]:
    """Fixed-expression firings by the Debian rule, computed independently of _cron.

    A matching wall time w fires at the first instant whose local reading is >= w: that is w
    itself when it exists (its first occurrence if repeated) and the end of a gap otherwise.
    """
    tz = ZoneInfo(zone)
    instants = [start + timedelta(minutes=i) for i in range(minutes)]
    readings = [t.astimezone(tz).replace(tzinfo=None) for t in instants]
    running_max = list(accumulate(readings, max))
    wall, fired = min(readings), set()
    while wall <= max(readings):
        index = bisect_left(running_max, wall)
        if match(wall) and index < len(instants) and readings[0] <= wall:
            fired.add(instants[index])
        wall += timedelta(minutes=1)
    return [t.astimezone(tz).isoformat() for t in sorted(fired)]


def _firings(expr: str, zone: str, start: datetime, end: datetime) -> list[str]:
    """Every firing in [start, end) by repeated next_after."""
    cron, tz = Cron.parse(expr), ZoneInfo(zone)
    got: list[str] = []
    moment = cron.next_after(start - timedelta(seconds=1), tz)
    while moment is not None and moment < end:
        got.append(moment.isoformat())
        moment = cron.next_after(moment, tz)
    return got


@pytest.mark.parametrize(
    ("expr", "match"),
    [
        ("30 2 * * *", lambda d: (d.hour, d.minute) == (2, 30)),
        ("15 2 * * *", lambda d: (d.hour, d.minute) == (2, 15)),
        ("45 1 * * *", lambda d: (d.hour, d.minute) == (1, 45)),
        ("0,30 1-3 * * *", lambda d: d.minute in (0, 30) and 1 <= d.hour <= 3),
        ("0-59 2 * * *", lambda d: d.hour == 2),
    ],
)
@pytest.mark.parametrize(("zone", "start_utc"), WINDOWS)
def test_fixed_matches_debian_brute_force(
    expr: str, match: Callable[[datetime], bool], zone: str, start_utc: str
) -> None:
    start = datetime.fromisoformat(start_utc).replace(tzinfo=UTC)
    expected = _debian_brute(zone, start, 8 * 60, match)
    assert expected, "window should contain firings"
    assert _firings(expr, zone, start, start + timedelta(hours=8)) == expected


@pytest.mark.parametrize(
    "expr", ["30 1 * * *", "30 2 * * *", "0,30 1-3 * * *", "*/15 * * * *", "15 30 2 * * *"]
)
@pytest.mark.parametrize(
    ("zone", "start_utc"),
    [
        (NY, "2026-03-08T04:00"),
        (NY, "2026-11-01T03:00"),
        (LH, "2026-04-04T12:00"),
        (LH, "2026-10-03T12:00"),
        ("Asia/Kolkata", "2026-03-07T18:00"),
    ],
)
def test_prev_and_next_agree(expr: str, zone: str, start_utc: str) -> None:
    cron, tz = Cron.parse(expr), ZoneInfo(zone)
    start = datetime.fromisoformat(start_utc).replace(tzinfo=UTC)
    for step in range(0, 8 * 3600, 1033):
        x = start + timedelta(seconds=step, microseconds=250_000)
        following, previous = cron.next_after(x, tz), cron.prev_at_or_before(x, tz)
        assert following is not None
        assert previous is not None
        assert previous <= x < following
        assert following.tzinfo is tz
        assert cron.prev_at_or_before(following, tz) == following
        assert cron.next_after(previous, tz) == following
        # Subtract in UTC: same-zone aware arithmetic is wall-clock arithmetic.
        just_before = following.astimezone(UTC) - timedelta(microseconds=1)
        assert cron.prev_at_or_before(just_before, tz) == previous


# --------------------------------------------------------------------------- API details


def test_after_in_another_zone_and_microseconds() -> None:
    cron, tz = Cron.parse("0 * * * *"), ZoneInfo(NY)
    after = datetime(2026, 6, 1, 13, 59, 59, 999_999, tzinfo=UTC)
    assert cron.next_after(after, tz) == datetime(2026, 6, 1, 10, tzinfo=tz)
    on_the_hour = datetime(2026, 6, 1, 14, tzinfo=UTC)
    assert cron.next_after(on_the_hour, tz) == datetime(2026, 6, 1, 11, tzinfo=tz)
    assert cron.prev_at_or_before(on_the_hour, tz) == on_the_hour


def test_naive_datetimes_are_rejected() -> None:
    cron = Cron.parse("@daily")
    with pytest.raises(ValueError, match="after must be a timezone-aware datetime"):
        cron.next_after(datetime(2026, 1, 1), ZoneInfo("UTC"))
    with pytest.raises(ValueError, match="at must be a timezone-aware datetime"):
        cron.prev_at_or_before(datetime(2026, 1, 1), ZoneInfo("UTC"))


def test_end_of_calendar_returns_none() -> None:
    last = datetime(9999, 12, 31, 23, 58, tzinfo=UTC)
    assert Cron.parse("*/5 * * * *").next_after(last, ZoneInfo("UTC")) is None


def test_identical_queries_hit_the_cache() -> None:
    cron, tz = Cron.parse("17 4 * * *"), ZoneInfo(ROME)
    after = datetime(2031, 7, 1, 12, 0, 0, 123, tzinfo=UTC)
    first = cron.next_after(after, tz)
    hits = _cached.cache_info().hits
    # Same whole second, different microseconds: still one evaluation.
    assert cron.next_after(after.replace(microsecond=999_999), tz) is first
    assert _cached.cache_info().hits == hits + 1
