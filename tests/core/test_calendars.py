"""Exclusion calendars (rsched._core.calendars): what an occurrence's zone makes of each entry,
the checks and their words, the stored form, and the reading of plain and iCalendar files. Pure,
no Redis."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest

from rsched._core.calendars import (
    DATES_MAX,
    DESCRIPTION_MAX_CHARS,
    RANGES_MAX,
    WEEKDAYS,
    Calendar,
    excluding,
    parse_calendar_file,
)
from rsched._core.errors import (
    CalendarInUse,
    CalendarNotFound,
    InvalidCalendar,
    RschedError,
    StateError,
)

ROME = ZoneInfo("Europe/Rome")
NY = ZoneInfo("America/New_York")
TOKYO = ZoneInfo("Asia/Tokyo")


def ms(text: str) -> int:
    """Epoch ms of an ISO 8601 time with an offset."""
    moment = datetime.fromisoformat(text)
    assert moment.utcoffset() is not None, text
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def local_ms(text: str, tz: ZoneInfo, *, fold: int = 0) -> int:
    """Epoch ms of a wall time in ``tz``."""
    return ms(datetime.fromisoformat(text).replace(tzinfo=tz, fold=fold).isoformat())


# --------------------------------------------------------------------------- what is excluded


def test_dates_are_read_in_each_schedules_zone() -> None:
    christmas = Calendar.build("xmas", dates=["2026-12-25"])
    # 23:30 UTC on the 24th is already the 25th in Rome, still the 24th in New York.
    eve = ms("2026-12-24T23:30:00Z")
    assert christmas.excludes(eve, ROME)
    assert not christmas.excludes(eve, NY)
    # 23:30 UTC on the 25th: the 26th in Rome, the 25th in New York.
    night = ms("2026-12-25T23:30:00Z")
    assert not christmas.excludes(night, ROME)
    assert christmas.excludes(night, NY)
    # The whole local day, first and last ms.
    assert christmas.excludes(local_ms("2026-12-25T00:00", TOKYO), TOKYO)
    assert christmas.excludes(local_ms("2026-12-25T23:59:59.999", TOKYO), TOKYO)
    assert not christmas.excludes(local_ms("2026-12-26T00:00", TOKYO), TOKYO)
    assert not christmas.excludes(local_ms("2026-12-24T23:59:59.999", TOKYO), TOKYO)


def test_weekdays_take_any_spelling_and_the_local_weekday() -> None:
    weekend = Calendar.build("weekend", weekdays=["Sunday", "SAT", "sat", " sun "])
    assert weekend.weekdays == ("sat", "sun")
    assert Calendar.build("all", weekdays=list(reversed(WEEKDAYS))).weekdays == WEEKDAYS
    # Friday 2026-03-06 23:30 UTC is Saturday 00:30 in Rome, Friday evening in New York.
    friday_night = ms("2026-03-06T23:30:00Z")
    assert weekend.excludes(friday_night, ROME)
    assert not weekend.excludes(friday_night, NY)
    assert weekend.excludes(local_ms("2026-03-08T12:00", NY), NY)  # a Sunday
    assert not weekend.excludes(local_ms("2026-03-09T00:00", NY), NY)  # Monday


def test_a_naive_range_is_a_wall_time_in_each_zone() -> None:
    afternoon = Calendar.build("eve", ranges=[("2026-12-24T14:00", "2026-12-24T18:00")])
    for tz in (ROME, NY, TOKYO):
        assert afternoon.excludes(local_ms("2026-12-24T14:00", tz), tz)  # start included
        assert afternoon.excludes(local_ms("2026-12-24T17:59:59.999", tz), tz)
        assert not afternoon.excludes(local_ms("2026-12-24T18:00", tz), tz)  # end excluded
        assert not afternoon.excludes(local_ms("2026-12-24T13:59:59.999", tz), tz)
    # One instant: 14:00 in Rome is 08:00 in New York, outside its afternoon.
    assert not afternoon.excludes(local_ms("2026-12-24T14:00", ROME), NY)


def test_an_aware_range_is_one_period_for_every_zone() -> None:
    outage = Calendar.build("outage", ranges=["2026-12-24T14:00+01:00..2026-12-24T18:00+01:00"])
    inside, after = ms("2026-12-24T13:00:00Z"), ms("2026-12-24T17:00:00Z")
    for tz in (ROME, NY, TOKYO):
        assert outage.excludes(inside, tz)
        assert outage.excludes(ms("2026-12-24T16:59:59.999Z"), tz)
        assert not outage.excludes(after, tz)
    # Z and datetime objects alike.
    utc = Calendar.build("utc", ranges=[(datetime(2026, 1, 1, tzinfo=UTC), "2026-01-01T01:00:00Z")])
    assert utc.excludes(ms("2026-01-01T00:59:00Z"), NY)
    assert not utc.excludes(ms("2026-01-01T01:00:00Z"), NY)


def test_a_day_as_a_range_bound_is_a_whole_day() -> None:
    summer = Calendar.build("summer", ranges=["2026-08-10..2026-08-14"])
    for tz in (ROME, NY):
        assert summer.excludes(local_ms("2026-08-10T00:00", tz), tz)
        assert summer.excludes(local_ms("2026-08-14T23:59:59.999", tz), tz)  # end day included
        assert not summer.excludes(local_ms("2026-08-15T00:00", tz), tz)
        assert not summer.excludes(local_ms("2026-08-09T23:59:59.999", tz), tz)
    one_day = Calendar.build("one", ranges=[(date(2026, 5, 1), date(2026, 5, 1))])
    assert one_day.excludes(local_ms("2026-05-01T12:00", ROME), ROME)
    # A day and a time in one range: from the day's midnight to the time.
    morning = Calendar.build("am", ranges=["2026-05-02..2026-05-02T12:00"])
    assert morning.excludes(local_ms("2026-05-02T11:59", ROME), ROME)
    assert not morning.excludes(local_ms("2026-05-02T12:00", ROME), ROME)
    evening = Calendar.build("pm", ranges=["2026-05-02T18:00..2026-05-02"])
    assert evening.excludes(local_ms("2026-05-02T23:00", ROME), ROME)
    assert not evening.excludes(local_ms("2026-05-03T00:00", ROME), ROME)


def test_a_wall_range_in_a_fall_back_fold_holds_both_instants() -> None:
    # Rome repeats 02:00-03:00 on 2026-10-25: 02:15 happens at 00:15 and 01:15 UTC.
    fold = Calendar.build("fold", ranges=["2026-10-25T02:00..2026-10-25T02:30"])
    first, second = local_ms("2026-10-25T02:15", ROME), local_ms("2026-10-25T02:15", ROME, fold=1)
    assert second - first == 3_600_000
    assert fold.excludes(first, ROME)
    assert fold.excludes(second, ROME)
    assert not fold.excludes(local_ms("2026-10-25T02:45", ROME), ROME)


def test_overlapping_and_many_ranges() -> None:
    ranges = [
        ("2026-01-01T10:00", "2026-01-01T12:00"),
        ("2026-01-01T11:00", "2026-01-01T13:00"),  # overlaps the first
        ("2026-01-01T13:00", "2026-01-01T14:00"),  # touches the second
        ("2026-01-01T09:00", "2026-01-01T09:30"),
        ("2026-01-01T08:00Z", "2026-01-01T08:10Z"),
        ("2026-01-01T07:00Z", "2026-01-01T09:00Z"),  # holds the one before
    ]
    calendar = Calendar.build("busy", ranges=ranges)
    expected = {
        "08:59": False, "09:15": True, "09:30": False, "09:59": False, "10:00": True,
        "12:30": True, "13:30": True, "14:00": False,
    }  # fmt: skip
    for wall, excluded in expected.items():
        assert calendar.excludes(local_ms(f"2026-01-01T{wall}", NY), NY) is excluded, wall
    # The aware ranges are instants: 07:00-09:00 UTC, 02:00-04:00 in New York.
    assert calendar.excludes(ms("2026-01-01T07:00:00Z"), NY)
    assert calendar.excludes(ms("2026-01-01T08:05:00Z"), NY)
    assert calendar.excludes(ms("2026-01-01T08:59:59.999Z"), NY)
    assert not calendar.excludes(ms("2026-01-01T09:00:00Z"), NY)


def test_an_empty_calendar_excludes_nothing_and_excluding_names_the_first() -> None:
    empty = Calendar.build("empty")
    assert empty == Calendar("empty")
    assert not empty.excludes(ms("2026-12-25T12:00:00Z"), ROME)
    weekend = Calendar.build("weekend", weekdays=["sat", "sun"])
    holidays = Calendar.build("holidays", dates=["2026-12-25", "2026-12-26"])
    saturday_xmas = local_ms("2026-12-26T09:00", ROME)
    assert excluding([empty, holidays, weekend], saturday_xmas, ROME) == "holidays"
    assert excluding([empty, weekend, holidays], saturday_xmas, ROME) == "weekend"
    assert excluding([empty, weekend, holidays], local_ms("2026-12-28T09:00", ROME), ROME) is None
    assert excluding([], saturday_xmas, ROME) is None


def test_a_herd_asks_many_times_and_gets_the_same_answer() -> None:
    holidays = Calendar.build(
        "it",
        dates=[date(2026, 1, 1) + timedelta(days=7 * i) for i in range(52)],
        ranges=[f"2027-01-{d:02d}T09:00..2027-01-{d:02d}T10:00" for d in range(1, 29)],
    )
    due = local_ms("2026-01-08T03:00", ROME)
    assert all(holidays.excludes(due, ROME) for _ in range(10_000))
    assert not any(holidays.excludes(due + 86_400_000, ROME) for _ in range(10_000))


# --------------------------------------------------------------------------- checks


def test_build_normalises_what_it_is_given() -> None:
    calendar = Calendar.build(
        "bank-holidays-it",
        dates=["2026-12-26", date(2026, 1, 1), " 2026-12-25 ", "2026-12-26"],
        ranges=[
            "2026-08-10 .. 2026-08-14",
            ["2026-08-10", "2026-08-14"],
            ("2026-09-01", "2026-09-02"),
        ],
        description="",
    )
    assert calendar.dates == (date(2026, 1, 1), date(2026, 12, 25), date(2026, 12, 26))
    assert calendar.ranges == (
        (date(2026, 8, 10), date(2026, 8, 14)),
        (date(2026, 9, 1), date(2026, 9, 2)),
    )
    assert calendar.description is None
    assert calendar.updated_at is None


BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"name": "bank holidays"}, "name", "is not a valid calendar name"),
    ({"name": ""}, "name", "1-200 letters"),
    ({"dates": ["2026-02-30"]}, "dates[0]", "day is out of range"),
    ({"dates": ["2026-1-5"]}, "dates[0]", "give YYYY-MM-DD"),
    ({"dates": ["2026-12-25T10:00"]}, "dates[0]", "is a time, not a day"),
    ({"dates": [datetime(2026, 12, 25, 10)]}, "dates[0]", "give its day ('2026-12-25')"),
    ({"dates": [20261225]}, "dates[0]", "not a day"),
    ({"dates": "2026-12-25"}, "dates", "give a list"),
    ({"ranges": ["2026-12-26..2026-12-24"]}, "ranges[0]", "ends before it starts"),
    ({"ranges": [("2026-12-24T10:00", "2026-12-24T10:00")]}, "ranges[0]", "ends when it starts"),
    ({"ranges": [("2026-12-24", "2026-12-25T00:00Z")]}, "ranges[0]", "give both with an offset"),
    ({"ranges": ["2026-12-24"]}, "ranges[0]", "give 'START..END'"),
    ({"ranges": [("2026-12-24",)]}, "ranges[0]", "give (start, end)"),
    ({"ranges": ["2026-12-24..tomorrow"]}, "ranges[0]", "'tomorrow' is not a range bound"),
    ({"ranges": ["2026-12-24T25:00..2026-12-25"]}, "ranges[0]", "is not a datetime"),
    ({"ranges": "2026-12-24..2026-12-26"}, "ranges", "give a list"),
    ({"weekdays": ["sa"]}, "weekdays[0]", "give mon, tue, wed, thu, fri, sat, sun"),
    ({"weekdays": [5]}, "weekdays[0]", "5 is not a weekday"),
    ({"weekdays": "sat"}, "weekdays", "weekdays=['sat', 'sun']"),
    ({"description": 5}, "description", "give text or None"),
    ({"description": "x" * (DESCRIPTION_MAX_CHARS + 1)}, "description", "over the 2,000"),
]


@pytest.mark.parametrize(("given", "field", "fragment"), BAD)
def test_build_names_the_field_and_the_fix(
    given: dict[str, Any], field: str, fragment: str
) -> None:
    kwargs = {"name": "cal", **given}
    with pytest.raises(InvalidCalendar) as caught:
        Calendar.build(**kwargs)
    errors = dict(caught.value.errors)
    assert list(errors) == [field]
    assert fragment in errors[field]
    assert f"{field}: " in str(caught.value)


def test_build_lists_every_problem() -> None:
    with pytest.raises(InvalidCalendar) as caught:
        Calendar.build(
            "cal",
            dates=["2026-12-25", "x", "2026-13-01"],
            ranges=["2026-01-01..2026-01-02", "a..b"],
            weekdays=["sat", "sunday", "funday"],
        )
    assert [field for field, _ in caught.value.errors] == [
        "dates[1]", "dates[2]", "ranges[1]", "weekdays[2]",
    ]  # fmt: skip
    assert caught.value.name == "cal"
    assert str(caught.value).startswith("invalid calendar 'cal': dates[1]: 'x' is not a day")
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, RschedError)


def test_the_limits_of_a_calendar() -> None:
    first = date(2000, 1, 1)
    days = [first + timedelta(days=i) for i in range(DATES_MAX)]
    assert len(Calendar.build("big", dates=days).dates) == DATES_MAX
    assert len(Calendar.build("big", dates=[*days, days[0]]).dates) == DATES_MAX  # counted once
    with pytest.raises(InvalidCalendar, match="10,001 days, over the 10,000"):
        Calendar.build("big", dates=[*days, first - timedelta(days=1)])
    spans = [(d, d) for d in days[: RANGES_MAX + 1]]
    assert len(Calendar.build("big", ranges=spans[:RANGES_MAX]).ranges) == RANGES_MAX
    with pytest.raises(InvalidCalendar) as caught:
        Calendar.build("big", ranges=spans)
    assert dict(caught.value.errors)["ranges"].startswith("1,001 ranges, over the 1,000")
    # A union over a limit is refused too.
    with pytest.raises(InvalidCalendar, match="over the 10,000"):
        Calendar.build("a", dates=days).merged(Calendar.build("b", dates=[first - timedelta(1)]))


def test_a_long_list_of_problems_is_cut_in_the_message() -> None:
    with pytest.raises(InvalidCalendar) as caught:
        Calendar.build("cal", dates=["nope"] * 60)
    assert len(caught.value.errors) == 60
    assert str(caught.value).endswith("... and 10 more (see .errors)")


# --------------------------------------------------------------------------- stored form


def test_to_json_holds_only_what_is_set() -> None:
    assert Calendar.build("empty").to_json() == "{}"
    calendar = Calendar.build(
        "it",
        dates=["2026-12-25", "2026-01-01"],
        ranges=[
            "2026-08-10..2026-08-14",
            "2026-12-24T14:00..2026-12-24T18:00",
            (datetime(2026, 12, 31, 18, tzinfo=ROME), datetime(2027, 1, 1, 2, tzinfo=ROME)),
        ],
        weekdays=["sunday"],
        description="Festività",
    )
    stamped = dataclasses.replace(
        calendar, updated_at=datetime(2026, 5, 1, 12, 0, 0, 250_000, tzinfo=UTC)
    )
    assert orjson.loads(stamped.to_json()) == {
        "dates": ["2026-01-01", "2026-12-25"],
        "ranges": [
            ["2026-08-10", "2026-08-14"],
            ["2026-12-24T14:00:00", "2026-12-24T18:00:00"],
            ["2026-12-31T18:00:00+01:00", "2027-01-01T02:00:00+01:00"],
        ],
        "weekdays": ["sun"],
        "description": "Festività",
        "updated_at": 1777636800250,
    }
    again = Calendar.from_json("it", stamped.to_json())
    assert again == stamped
    assert again.updated_at == stamped.updated_at
    assert again.updated_at is not None
    assert again.updated_at.tzinfo is UTC
    assert Calendar.from_json("it", stamped.to_json().encode()) == stamped
    # The compiled form comes back too.
    eve = local_ms("2026-12-24T15:00", NY)
    assert again.excludes(eve, NY)
    assert stamped.excludes(eve, NY)
    assert Calendar.from_json("empty", "{}") == Calendar("empty")


def test_as_dict_is_ready_for_json() -> None:
    calendar = Calendar.build(
        "it", dates=["2026-12-25"], ranges=["2026-12-24T14:00Z..2026-12-24T18:00Z"]
    )
    assert calendar.as_dict() == {
        "name": "it",
        "dates": ["2026-12-25"],
        "ranges": [["2026-12-24T14:00:00+00:00", "2026-12-24T18:00:00+00:00"]],
        "weekdays": [],
        "description": None,
        "updated_at": None,
    }
    stamped = dataclasses.replace(calendar, updated_at=datetime(2026, 5, 1, tzinfo=UTC))
    assert stamped.as_dict()["updated_at"] == "2026-05-01T00:00:00+00:00"
    orjson.dumps(stamped.as_dict())


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("not json", "line 1 column 1"),
        ("[1, 2]", "a JSON list, not an object"),
        ('{"dates": ["2026-02-30"]}', "dates[0]"),
        ('{"dates": "2026-12-25"}', "dates is not a JSON list"),
        ('{"ranges": [["2026-12-26", "2026-12-24"]]}', "ends before it starts"),
        ('{"weekdays": ["caturday"]}', "weekdays[0]"),
        ('{"updated_at": "yesterday"}', "updated_at is 'yesterday'"),
        ('{"description": 42}', "description"),
    ],
)
def test_from_json_refuses_what_is_not_a_calendar(raw: str, why: str) -> None:
    with pytest.raises(StateError) as caught:
        Calendar.from_json("bank-holidays-it", raw)
    message = str(caught.value)
    assert message.startswith("stored calendar 'bank-holidays-it' is not a calendar (")
    assert why in message
    assert "edited by hand" in message


def test_from_json_reads_past_the_limits_and_skips_unknown_fields() -> None:
    days = [(date(2000, 1, 1) + timedelta(days=i)).isoformat() for i in range(DATES_MAX + 5)]
    raw = orjson.dumps({"dates": days, "colour": "red", "description": "x" * 3000})
    calendar = Calendar.from_json("old", raw)
    assert len(calendar.dates) == DATES_MAX + 5


def test_merged_is_the_union() -> None:
    ours = Calendar.build(
        "ours", dates=["2026-12-25"], ranges=["2026-08-10..2026-08-14"], weekdays=["sun"]
    )
    theirs = Calendar.build(
        "theirs",
        dates=["2026-12-26", "2026-12-25"],
        ranges=["2026-08-10..2026-08-14", "2026-12-31T18:00..2027-01-01"],
        weekdays=["sat"],
        description="imported",
    )
    both = dataclasses.replace(ours, updated_at=datetime.now(UTC)).merged(theirs)
    assert both == Calendar(
        "ours",
        (date(2026, 12, 25), date(2026, 12, 26)),
        (
            (date(2026, 8, 10), date(2026, 8, 14)),
            (datetime(2026, 12, 31, 18), date(2027, 1, 1)),
        ),
        ("sat", "sun"),
        "imported",
    )
    assert both.updated_at is None
    assert both.excludes(local_ms("2027-01-01T12:00", NY), NY)
    assert dataclasses.replace(ours, description="ours").merged(theirs).description == "ours"


def test_a_mixed_range_given_directly_is_refused() -> None:
    with pytest.raises(InvalidCalendar, match="give both with an offset"):
        Calendar("x", ranges=((date(2026, 1, 1), datetime(2026, 1, 2, tzinfo=UTC)),))


# --------------------------------------------------------------------------- errors


def test_calendar_errors() -> None:
    missing = CalendarNotFound("bank-holidays-it")
    assert isinstance(missing, KeyError)
    assert isinstance(missing, RschedError)
    assert str(missing) == (
        "calendar 'bank-holidays-it' does not exist; create it first with `rsched calendar set "
        "bank-holidays-it ...` or Client.set_calendar('bank-holidays-it', ...)"
    )
    few = CalendarInUse("it", ["a", "b"])
    assert few.schedule_ids == ["a", "b"]
    assert "in the exclude of 2 schedule(s) ('a', 'b'); remove the calendar" in str(few)
    many = CalendarInUse("it", [f"s{i}" for i in range(13)])
    assert "('s0', 's1', 's2', 's3', 's4', 's5', 's6', 's7', 's8', 's9' and 3 more)" in str(many)


# --------------------------------------------------------------------------- plain files


PLAIN = """\
# Company holidays 2026
2026-01-01   # New Year
2026-01-06

2026-08-10..2026-08-14      # summer closure, the 14th included
2026-12-24T14:00 .. 2026-12-24T18:00
2026-12-31T17:00Z..2027-01-01T06:00Z
"""


def test_a_plain_file() -> None:
    dates, ranges, description = parse_calendar_file(PLAIN)
    assert dates == [date(2026, 1, 1), date(2026, 1, 6)]
    assert ranges == [
        (date(2026, 8, 10), date(2026, 8, 14)),
        (datetime(2026, 12, 24, 14), datetime(2026, 12, 24, 18)),
        (datetime(2026, 12, 31, 17, tzinfo=UTC), datetime(2027, 1, 1, 6, tzinfo=UTC)),
    ]
    assert description is None
    assert parse_calendar_file("") == ([], [], None)
    assert parse_calendar_file("\r\n# nothing\r\n2026-05-01\r\n")[0] == [date(2026, 5, 1)]


def test_a_plain_file_names_each_bad_line() -> None:
    text = "2026-01-01\n2026-02-30\n\n# fine\nsat\n2026-12-24T10:00\n2026-03-05..2026-03-01\n"
    with pytest.raises(InvalidCalendar) as caught:
        parse_calendar_file(text, source="holidays.txt")
    errors = caught.value.errors
    assert [where for where, _ in errors] == ["line 2", "line 5", "line 6", "line 7"]
    assert "day is out of range for month" in errors[0][1]
    assert "'sat' is not a day" in errors[1][1]
    assert "is a time, not a day" in errors[2][1]
    assert "ends before it starts" in errors[3][1]
    assert caught.value.source == "holidays.txt"
    assert str(caught.value).startswith("invalid calendar file 'holidays.txt': line 2: ")


# --------------------------------------------------------------------------- iCalendar files

# Italian public holidays as a calendar application exports them: a time-zone block, yearly
# rules (with COUNT, with UNTIL and the BYMONTH/BYMONTHDAY a rule often repeats), a two-day
# event, a timed one in Europe/Rome, EXDATE, an alarm, folded lines.
ITALY = """\
BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//Example//Festività IT//IT\r
CALSCALE:GREGORIAN\r
X-WR-CALNAME:Festività nazionali\r
  italiane\r
X-WR-TIMEZONE:Europe/Rome\r
BEGIN:VTIMEZONE\r
TZID:Europe/Rome\r
BEGIN:STANDARD\r
DTSTART:19701025T030000\r
TZOFFSETFROM:+0200\r
TZOFFSETTO:+0100\r
RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU\r
END:STANDARD\r
BEGIN:DAYLIGHT\r
DTSTART:19700329T020000\r
TZOFFSETFROM:+0100\r
TZOFFSETTO:+0200\r
RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU\r
END:DAYLIGHT\r
END:VTIMEZONE\r
BEGIN:VEVENT\r
UID:capodanno@example.it\r
DTSTART;VALUE=DATE:20260101\r
DTEND;VALUE=DATE:20260102\r
RRULE:FREQ=YEARLY;COUNT=3\r
SUMMARY:Capodanno\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:pasquetta-2026@example.it\r
DTSTART;VALUE=DATE:20260406\r
SUMMARY:Lunedì dell'Angelo\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:liberazione@example.it\r
DTSTART;VALUE=DATE:20260425\r
DTEND;VALUE=DATE:20260426\r
RRULE:FREQ=YEARLY;BYMONTH=4;BYMONTHDAY=25;UNTIL=20280425\r
SUMMARY:Festa della Liberazione\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:natale@example.it\r
DTSTART;VALUE=DATE:20261225\r
DTEND;VALUE=DATE:20261227\r
RRULE:FREQ=YEARLY;COUNT=2\r
SUMMARY:Natale e Santo Stefano\r
DESCRIPTION:Uffici chiusi per Natale e Santo Stefano\\, riapertura il 28\r
  dicembre.\r
BEGIN:VALARM\r
ACTION:DISPLAY\r
TRIGGER:-PT15H\r
DESCRIPTION:Promemoria\r
END:VALARM\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:vigilia@example.it\r
DTSTART;TZID=Europe/Rome:20261224T140000\r
DTEND;TZID=Europe/Rome:20261224T180000\r
SUMMARY:Chiusura anticipata\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:ferragosto@example.it\r
DTSTART;VALUE=DATE:20260815\r
RRULE:FREQ=YEARLY;UNTIL=20300815\r
EXDATE;VALUE=DATE:20270815,20280815\r
SUMMARY:Ferragosto\r
END:VEVENT\r
END:VCALENDAR\r
"""


def test_an_icalendar_file_of_holidays() -> None:
    dates, ranges, description = parse_calendar_file(ITALY, source="it.ics")
    assert description == "Festività nazionali italiane"
    assert sorted(dates) == [
        date(2026, 1, 1), date(2026, 4, 6), date(2026, 4, 25), date(2026, 8, 15),
        date(2027, 1, 1), date(2027, 4, 25),
        date(2028, 1, 1), date(2028, 4, 25),
        date(2029, 8, 15), date(2030, 8, 15),
    ]  # fmt: skip
    assert set(ranges) == {
        (date(2026, 12, 25), date(2026, 12, 26)),
        (date(2027, 12, 25), date(2027, 12, 26)),
        (datetime(2026, 12, 24, 14, tzinfo=ROME), datetime(2026, 12, 24, 18, tzinfo=ROME)),
    }
    assert len(ranges) == 3
    # As a calendar: Santo Stefano is excluded everywhere on its local day, the early closing is
    # one instant (15:00 in Rome is 09:00 in New York).
    italy = Calendar.build("it", dates=dates, ranges=ranges, description=description)
    assert italy.excludes(local_ms("2026-12-26T10:00", NY), NY)
    assert not italy.excludes(local_ms("2026-12-27T10:00", ROME), ROME)
    assert italy.excludes(local_ms("2026-12-24T15:00", ROME), ROME)
    assert italy.excludes(local_ms("2026-12-24T09:00", NY), NY)
    assert not italy.excludes(local_ms("2026-12-24T15:00", NY), NY)
    assert Calendar.from_json("it", italy.to_json()) == italy


def ics(*event: str, head: tuple[str, ...] = ()) -> str:
    """A calendar of one event; the event's own lines start at line 3 (with no ``head``)."""
    return "\n".join(
        ["BEGIN:VCALENDAR", *head, "BEGIN:VEVENT", *event, "END:VEVENT", "END:VCALENDAR", ""]
    )


def read_ics(*event: str) -> tuple[list[date], list[tuple[Any, Any]]]:
    dates, ranges, _ = parse_calendar_file(ics(*event))
    return dates, ranges


def ics_errors(*event: str) -> list[tuple[str, str]]:
    with pytest.raises(InvalidCalendar) as caught:
        parse_calendar_file(ics(*event), source="feed.ics")
    assert caught.value.source == "feed.ics"
    return caught.value.errors


def test_icalendar_all_day_events() -> None:
    assert read_ics("DTSTART;VALUE=DATE:20261225") == ([date(2026, 12, 25)], [])
    assert read_ics("DTSTART;VALUE=DATE:20261225", "DTEND;VALUE=DATE:20261226") == (
        [date(2026, 12, 25)],
        [],
    )
    # Several days: a range whose end is the last day (DTEND is the day after).
    assert read_ics("DTSTART;VALUE=DATE:20261224", "DTEND;VALUE=DATE:20261227") == (
        [],
        [(date(2026, 12, 24), date(2026, 12, 26))],
    )
    # A writer that gives the day itself as the end of a one-day event.
    assert read_ics("DTSTART;VALUE=DATE:20261225", "DTEND;VALUE=DATE:20261225") == (
        [date(2026, 12, 25)],
        [],
    )
    assert read_ics("DTSTART;VALUE=DATE:20261224", "DURATION:P3D")[1] == [
        (date(2026, 12, 24), date(2026, 12, 26))
    ]
    assert read_ics("DTSTART;VALUE=DATE:20261224", "DURATION:P1W")[1] == [
        (date(2026, 12, 24), date(2026, 12, 30))
    ]
    # Without VALUE=DATE the value's shape tells.
    assert read_ics("DTSTART:20261225")[0] == [date(2026, 12, 25)]


def test_icalendar_timed_events() -> None:
    utc = read_ics("DTSTART:20261224T090000Z", "DTEND:20261224T170000Z")
    assert utc == (
        [],
        [(datetime(2026, 12, 24, 9, tzinfo=UTC), datetime(2026, 12, 24, 17, tzinfo=UTC))],
    )
    rome = read_ics(
        "DTSTART;TZID=Europe/Rome:20261225T090000", 'DTEND;TZID="Europe/Rome":20261225T120000'
    )
    assert rome[1] == [
        (datetime(2026, 12, 25, 9, tzinfo=ROME), datetime(2026, 12, 25, 12, tzinfo=ROME))
    ]
    # Floating: a wall time in each schedule's zone.
    floating = read_ics("DTSTART:20261225T090000", "DURATION:PT2H30M")
    assert floating[1] == [(datetime(2026, 12, 25, 9), datetime(2026, 12, 25, 11, 30))]
    assert read_ics("DTSTART:20261225T220000Z", "DURATION:P1D")[1] == [
        (datetime(2026, 12, 25, 22, tzinfo=UTC), datetime(2026, 12, 26, 22, tzinfo=UTC))
    ]
    # An instant (no end, or an end at the start) excludes nothing.
    assert read_ics("DTSTART:20261225T090000Z") == ([], [])
    assert read_ics("DTSTART:20261225T090000Z", "DTEND:20261225T090000Z") == ([], [])
    assert read_ics("DTSTART:20261225T090000Z", "DURATION:PT0S") == ([], [])


def test_icalendar_folded_lines_and_quoted_parameters() -> None:
    text = ics(
        "SUMMARY:A very long summary that a writer",
        "  folded onto a second line",
        "DTSTART;TZID=Europe/Ro",
        " me:20261225T090000",
        'X-UNKNOWN;X-PARAM="a:b;c":value',
        "DTEND;TZID=Europe/Rome:2026",
        "\t1225T100000",
        head=("X-WR-CALNAME:Team\\, Rome \\; office",),
    )
    _, ranges, description = parse_calendar_file(text)
    assert ranges == [
        (datetime(2026, 12, 25, 9, tzinfo=ROME), datetime(2026, 12, 25, 10, tzinfo=ROME))
    ]
    assert description == "Team, Rome ; office"


def test_icalendar_yearly_rules() -> None:
    count = read_ics("DTSTART;VALUE=DATE:20261225", "RRULE:FREQ=YEARLY;COUNT=3")[0]
    assert count == [date(2026, 12, 25), date(2027, 12, 25), date(2028, 12, 25)]
    until = read_ics("DTSTART;VALUE=DATE:20261225", "RRULE:FREQ=YEARLY;UNTIL=20281224T230000Z")
    assert until[0] == [date(2026, 12, 25), date(2027, 12, 25)]
    # Open-ended: DTSTART and the ten years after it.
    endless = read_ics("DTSTART;VALUE=DATE:20260101", "RRULE:FREQ=YEARLY")[0]
    assert endless == [date(year, 1, 1) for year in range(2026, 2037)]
    # EXDATE drops occurrences, more than one line of them too.
    gaps = read_ics(
        "DTSTART;VALUE=DATE:20260501",
        "RRULE:FREQ=YEARLY;COUNT=4",
        "EXDATE;VALUE=DATE:20270501",
        "EXDATE:20290501T000000",
    )[0]
    assert gaps == [date(2026, 5, 1), date(2028, 5, 1)]
    # A multi-day yearly event: a range each year.
    stretch = read_ics(
        "DTSTART;VALUE=DATE:20261224", "DTEND;VALUE=DATE:20261227", "RRULE:FREQ=YEARLY;COUNT=2"
    )[1]
    assert stretch == [
        (date(2026, 12, 24), date(2026, 12, 26)),
        (date(2027, 12, 24), date(2027, 12, 26)),
    ]
    # 29 February happens in leap years only, and COUNT counts those.
    leap = read_ics("DTSTART;VALUE=DATE:20240229", "RRULE:FREQ=YEARLY;COUNT=2")[0]
    assert leap == [date(2024, 2, 29), date(2028, 2, 29)]


def test_icalendar_yearly_rules_from_long_ago_reach_past_today() -> None:
    text = ics("DTSTART;VALUE=DATE:19900425", "RRULE:FREQ=YEARLY")
    assert max(parse_calendar_file(text)[0]) == date(2000, 4, 25)
    dates = parse_calendar_file(text, today=date(2026, 5, 1))[0]
    assert min(dates) == date(1990, 4, 25)
    assert max(dates) == date(2036, 4, 25)
    assert date(2026, 4, 25) in dates


def test_icalendar_moved_cancelled_and_added_occurrences() -> None:
    text = "\n".join(
        [
            "BEGIN:VCALENDAR",
            "BEGIN:VEVENT",
            "UID:fair",
            "DTSTART;VALUE=DATE:20260910",
            "RRULE:FREQ=YEARLY;COUNT=3",
            "RDATE;VALUE=DATE:20300910,20310910",
            "END:VEVENT",
            "BEGIN:VEVENT",  # 2027's fair moved to the 12th
            "UID:fair",
            "RECURRENCE-ID;VALUE=DATE:20270910",
            "DTSTART;VALUE=DATE:20270912",
            "END:VEVENT",
            "BEGIN:VEVENT",  # an override that keeps its day
            "UID:fair",
            "RECURRENCE-ID;VALUE=DATE:20280910",
            "DTSTART;VALUE=DATE:20280910",
            "SUMMARY:Fair (new venue)",
            "END:VEVENT",
            "BEGIN:VEVENT",
            "UID:strike",
            "STATUS:CANCELLED",
            "DTSTART;VALUE=DATE:20260301",
            "END:VEVENT",
            "END:VCALENDAR",
        ]
    )
    dates = sorted(parse_calendar_file(text)[0])
    assert dates == [
        date(2026, 9, 10), date(2027, 9, 12), date(2028, 9, 10), date(2030, 9, 10),
        date(2031, 9, 10),
    ]  # fmt: skip


def test_icalendar_skips_other_components_and_unknown_properties() -> None:
    text = "\n".join(
        [
            "",
            "BEGIN:VCALENDAR",
            "X-WR-CALNAME:Team",
            "BEGIN:VTODO",
            "DTSTART:20261225T090000Z",
            "DUE:20261226T090000Z",
            "END:VTODO",
            "BEGIN:VEVENT",
            "DTSTART;VALUE=DATE:20261225",
            "X-MICROSOFT-CDO-BUSYSTATUS:OOF",
            'ATTENDEE;CN="Rossi, Mario";ROLE=REQ-PARTICIPANT:mailto:mario@example.it',
            "BEGIN:VALARM",
            "TRIGGER;VALUE=DATE-TIME:20261201T090000Z",
            "DTSTART:20261201T090000Z",
            "END:VALARM",
            "END:VEVENT",
            "END:VCALENDAR",
        ]
    )
    assert parse_calendar_file(text) == ([date(2026, 12, 25)], [], "Team")


@pytest.mark.parametrize(
    ("event", "line", "fragment"),
    [
        (["DTSTART;VALUE=DATE:20260101", "RRULE:FREQ=WEEKLY;BYDAY=MO"], 4, "only yearly rules"),
        (["DTSTART;VALUE=DATE:20260101", "RRULE:FREQ=YEARLY;INTERVAL=2"], 4, "is not read"),
        (["DTSTART;VALUE=DATE:20261126", "RRULE:FREQ=YEARLY;BYDAY=4TH"], 4, "expand the recurring"),
        (["DTSTART;VALUE=DATE:20261225", "RRULE:FREQ=YEARLY;BYMONTH=11"], 4, "is not read"),
        (["DTSTART;VALUE=DATE:20261225", "RRULE:COUNT=2"], 4, "is not read"),
        (["DTSTART;VALUE=DATE:20261225", "RRULE:FREQ=YEARLY;COUNT=0"], 4, "not a whole number"),
        (
            ["DTSTART:20261225T090000Z", "DTEND:20261225T100000Z", "RRULE:FREQ=YEARLY"],
            5,
            "RRULE on a timed event is not read",
        ),
        (
            ["DTSTART;TZID=Europe/Atlantis:20261225T090000"],
            3,
            "TZID 'Europe/Atlantis' is not an IANA time zone",
        ),
        (["DTSTART;TZID=W. Europe Standard Time:20261225T090000"], 3, "export the times in UTC"),
        (["DTSTART:20261225T090000Z", "DTEND:20261225T080000Z"], 4, "ends before it starts"),
        (["DTSTART:20261225T090000Z", "DTEND:20261225T100000"], 4, "floating"),
        (["DTSTART:20261225T090000Z", "DTEND;VALUE=DATE:20261226"], 4, "DTEND is a day"),
        (["DTSTART;VALUE=DATE:20261225", "DTEND:20261225T100000Z"], 4, "DTEND is a time"),
        (["DTSTART;VALUE=DATE:20261225", "DTEND;VALUE=DATE:20261224"], 4, "ends before"),
        (["DTSTART;VALUE=DATE:20261225", "DURATION:PT12H"], 4, "not whole days"),
        (["DTSTART:20261225T090000Z", "DURATION:-PT1H"], 4, "is negative"),
        (["DTSTART:20261225T090000Z", "DURATION:2 hours"], 4, "is not a duration"),
        (["DTSTART:20261325"], 3, "is not a date or time"),
        (["DTSTART:25/12/2026"], 3, "is not an iCalendar date"),
        (["SUMMARY:No start"], 2, "has no DTSTART"),
        (["DTSTART;VALUE=DATE:20261225", "just some text"], 4, "is not an iCalendar line"),
    ],
)
def test_icalendar_problems_name_their_line(event: list[str], line: int, fragment: str) -> None:
    errors = ics_errors(*event)
    assert len(errors) == 1, errors
    where, message = errors[0]
    assert where == f"line {line}"
    assert fragment in message


def test_icalendar_problems_are_all_listed() -> None:
    text = "\n".join(
        [
            "BEGIN:VCALENDAR",
            "BEGIN:VEVENT",
            "DTSTART;VALUE=DATE:20260101",
            "RRULE:FREQ=MONTHLY",
            "END:VEVENT",
            "BEGIN:VEVENT",
            "DTSTART;VALUE=DATE:20260102",
            "END:VEVENT",
            "BEGIN:VEVENT",
            "DTSTART;TZID=Mars/Olympus:20260103T090000",
            "END:VEVENT",
            "END:VCALENDAR",
        ]
    )
    with pytest.raises(InvalidCalendar) as caught:
        parse_calendar_file(text, source="feed.ics")
    assert [where for where, _ in caught.value.errors] == ["line 4", "line 10"]
    assert str(caught.value).startswith("invalid calendar file 'feed.ics': line 4: RRULE")


def test_a_cut_or_mismatched_icalendar_file() -> None:
    cut = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261225\n"
    with pytest.raises(InvalidCalendar) as caught:
        parse_calendar_file(cut)
    assert caught.value.errors == [
        ("line 4", "the file ends inside VEVENT (opened at line 2); is it cut short?")
    ]
    crossed = (
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20261225\nEND:VTODO\nEND:VEVENT\nEND:VCALENDAR"
    )
    with pytest.raises(InvalidCalendar, match=r"line 4: END:VTODO closes VEVENT \(line 2\)"):
        parse_calendar_file(crossed)


def test_the_kind_of_file_is_told_by_its_first_line() -> None:
    # A plain file whose comment mentions iCalendar is still plain; a BOM and blank lines before
    # BEGIN:VCALENDAR do not hide it.
    assert parse_calendar_file("# exported from BEGIN:VCALENDAR\n2026-12-25\n")[0] == [
        date(2026, 12, 25)
    ]
    text = "\ufeff\n\nbegin:vcalendar\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261225\nEND:VEVENT\n"
    text += "END:VCALENDAR\n"
    assert parse_calendar_file(text)[0] == [date(2026, 12, 25)]


def test_aware_bounds_keep_their_instant_through_json() -> None:
    # A TZID time is stored with its offset and read back as the same instant.
    start = datetime(2026, 7, 1, 9, tzinfo=ROME)
    end = start + timedelta(hours=1)
    calendar = Calendar.build("summer", ranges=[(start, end)])
    again = Calendar.from_json("summer", calendar.to_json())
    ((a, b),) = again.ranges
    assert isinstance(a, datetime)
    assert a == start
    assert b == end
    assert a.utcoffset() == timedelta(hours=2)
    assert a.tzinfo == timezone(timedelta(hours=2))
