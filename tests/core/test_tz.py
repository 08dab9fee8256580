"""Time-zone names: IANA names accepted in their canonical spelling, abbreviations and typos
explained."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo

import pytest

from rsched import InvalidSchedule, Schedule
from rsched._core.timezones import (
    _ABBREVIATIONS,
    _LEGACY,
    _RENAMED,
    _zone_names,
    canonical_timezone,
    resolve_timezone,
)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("UTC", "UTC"),
        ("Europe/Rome", "Europe/Rome"),
        ("America/New_York", "America/New_York"),
        ("Australia/Lord_Howe", "Australia/Lord_Howe"),
        ("Asia/Kolkata", "Asia/Kolkata"),
        ("Etc/GMT+5", "Etc/GMT+5"),
        ("America/Argentina/Buenos_Aires", "America/Argentina/Buenos_Aires"),
        ("America/Port-au-Prince", "America/Port-au-Prince"),
        # Legacy names that look like abbreviations but are real tzdata zones.
        ("EST", "EST"),
        ("CET", "CET"),
        ("MST", "MST"),
        ("GMT+0", "GMT+0"),
        # Case-insensitive, surrounding blanks ignored.
        ("europe/rome", "Europe/Rome"),
        ("  UTC ", "UTC"),
    ],
)
def test_accepts_iana_names(name: str, key: str) -> None:
    zone = resolve_timezone(name)
    assert isinstance(zone, ZoneInfo)
    assert zone.key == key


def test_zone_objects_are_cached() -> None:
    assert resolve_timezone("Europe/Rome") is resolve_timezone("Europe/Rome")
    assert resolve_timezone("Europe/Rome") is ZoneInfo("Europe/Rome")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "PST",
            "'PST' is a time zone abbreviation, not an IANA zone name; use a location name "
            "such as 'America/Los_Angeles'",
        ),
        ("pdt", "'pdt' is a time zone abbreviation"),
        ("CEST", "use a location name such as 'Europe/Berlin'"),
        ("BST", "'Europe/London'"),
        ("IST", "'Asia/Kolkata'"),
        ("AEST", "'Australia/Sydney'"),
        ("XYZT", "'XYZT' looks like a time zone abbreviation"),
        ("UTX", "(did you mean 'UTC'?)"),
        (
            "Europe/Rme",
            "unknown time zone 'Europe/Rme'; use an IANA name such as 'America/Los_Angeles' "
            "(did you mean 'Europe/Rome'?)",
        ),
        ("Amerika/Chicago", "(did you mean 'America/Chicago'?)"),
        ("Rome", "(did you mean 'Europe/Rome'?)"),
        ("New York", "(did you mean 'America/New_York'?)"),
        ("Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
        ("UTC+5", "fixed UTC offset, not an IANA zone name; use a location name"),
        ("UTC+5", "'Etc/GMT-5' (sign inverted)"),
        ("-03:00", "'Etc/GMT+3'"),
        ("", "time zone name is empty"),
        ("   ", "time zone name is empty"),
        ("../etc/passwd", "invalid time zone name '../etc/passwd'"),
        ("Europe/../../etc", "invalid time zone name"),
        ("/etc/localtime", "invalid time zone name"),
        ("Europe/Rome\x00", "invalid time zone name"),
        ("A" * 65, "too long"),
        ("localtime", "depends on the host's configuration"),
    ],
)
def test_rejects_with_advice(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        resolve_timezone(name)


def test_abbreviation_table_is_consistent() -> None:
    names = _zone_names()
    # An abbreviation that is also a zone would be accepted, making its entry dead.
    assert not [abbr for abbr in _ABBREVIATIONS if abbr.lower() in names]
    assert not [z for zones in _ABBREVIATIONS.values() for z in zones if z.lower() not in names]


@pytest.mark.parametrize(
    ("name", "stored"),
    [
        ("UTC", "UTC"),
        ("utc", "UTC"),
        (" Etc/UTC ", "UTC"),
        ("Zulu", "UTC"),
        ("Etc/GMT", "UTC"),
        ("Europe/rome", "Europe/Rome"),
        ("AMERICA/NEW_YORK", "America/New_York"),
        ("US/Eastern", "America/New_York"),
        ("us/pacific", "America/Los_Angeles"),
        ("Canada/Newfoundland", "America/St_Johns"),
        ("Asia/Calcutta", "Asia/Kolkata"),
        ("Europe/Kiev", "Europe/Kyiv"),
        ("Europe/Vatican", "Europe/Vatican"),  # a link that names a place of its own: kept
        ("Etc/GMT+5", "Etc/GMT+5"),
    ],
)
def test_canonical_names(name: str, stored: str) -> None:
    assert canonical_timezone(name) == stored
    assert Schedule(id="z", task="t", every=60, timezone=name).timezone == stored


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("EST", "'America/New_York'"),
        ("est", "'America/New_York'"),
        ("MST", "'America/Denver' or 'America/Phoenix'"),
        ("HST", "'Pacific/Honolulu'"),
        ("EST5EDT", "'America/New_York'"),
        ("CST6CDT", "'America/Chicago'"),
        ("MST7MDT", "'America/Denver'"),
        ("PST8PDT", "'America/Los_Angeles'"),
        ("CET", "'Europe/Berlin', 'Europe/Paris' or 'Europe/Rome'"),
        ("EET", "'Europe/Athens' or 'Europe/Helsinki'"),
        ("WET", "'Europe/Lisbon'"),
        ("MET", "'Europe/Berlin'"),
    ],
)
def test_legacy_abbreviations_refused_like_pst(name: str, suggestion: str) -> None:
    expected = (
        f"{name!r} is a time zone abbreviation, not a location (tzdata keeps it only for old "
        f"systems); use a location name such as {suggestion}"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        canonical_timezone(name)
    with pytest.raises(InvalidSchedule, match=re.escape(f"timezone: {expected}")):
        Schedule(id="z", task="t", every=60, timezone=name)


@pytest.mark.parametrize("name", ["GMT", "gmt0", "GMT+0", "Greenwich"])
def test_gmt_is_ambiguous(name: str) -> None:
    with pytest.raises(ValueError, match="use 'UTC' for the fixed offset or 'Europe/London'"):
        canonical_timezone(name)


def test_abbreviations_and_typos_are_refused_alike() -> None:
    for name in ("PST", "Europe/Rme", "UTC+5", ""):
        with pytest.raises(ValueError, match=r".") as by_rule:
            canonical_timezone(name)
        with pytest.raises(ValueError, match=r".") as by_lookup:
            resolve_timezone(name)
        assert str(by_rule.value) == str(by_lookup.value)


def test_a_legacy_name_stored_earlier_still_reads() -> None:
    """A schedule an older rsched stored with timezone EST loads and computes its times."""
    stored = Schedule.from_hash("old", {"task": "t", "cron": "0 9 * * *", "timezone": "EST"})
    assert stored.timezone == "EST"
    assert resolve_timezone("EST").key == "EST"
    with pytest.raises(InvalidSchedule, match="timezone: 'EST' is a time zone abbreviation"):
        Schedule.parse(stored.model_dump(exclude={"next_run", "last_run"}))


def test_renamed_table_is_consistent() -> None:
    names = _zone_names()
    assert all(old.lower() in names and new.lower() in names for old, new in _RENAMED.items())
    assert all(name.lower() in names for name in _LEGACY)
