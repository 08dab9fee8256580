"""Time-zone name resolution: IANA names accepted, abbreviations and typos explained."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo

import pytest

from rsched._tz import _ABBREVIATIONS, _zone_names, resolve_timezone


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
