"""Time-zone names: accept IANA zones, reject abbreviations and typos with a suggested fix.

Abbreviations such as PST or CEST name an offset *and* a season, not a place, so they cannot
follow DST rules; users almost always mean a location zone. tzdata also carries a few legacy
zones spelled like abbreviations (EST, MST, HST, CET, EET, MET, WET, GMT) or like POSIX rules
(EST5EDT, CST6CDT, MST7MDT, PST8PDT): they are refused as input alike, with the location zone
people mean, but still read where an older rsched stored them.

Two functions: :func:`canonical_timezone` is the input rule (what a schedule may name, in the
spelling it is stored with) and :func:`resolve_timezone` turns any stored name into its zone.
"""

from __future__ import annotations

import difflib
import functools
import re
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

__all__ = ["canonical_timezone", "resolve_timezone"]

_EXAMPLE: Final = "'America/Los_Angeles'"
# The longest IANA name is 32 characters; anything much longer is not a zone name.
_MAX_NAME_LENGTH: Final = 64
# Spaces are let through only so that 'New York' can get a did-you-mean.
_NAME_CHARS: Final = re.compile(r"[A-Za-z0-9_+\-/ ]+")
_LOOKS_LIKE_ABBREVIATION: Final = re.compile(r"[A-Za-z]{2,5}")
_UTC_OFFSET: Final = re.compile(r"(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?", re.IGNORECASE)
# Present in the zone directory but describing the host, not a place.
_HOST_NAMES: Final = frozenset({"localtime", "posixrules"})

# Common abbreviations that are not zones themselves, with the location zones people mean.
_ABBREVIATIONS: Final[dict[str, tuple[str, ...]]] = {
    "PST": ("America/Los_Angeles",),
    "PDT": ("America/Los_Angeles",),
    "MDT": ("America/Denver",),
    "CST": ("America/Chicago", "Asia/Shanghai"),
    "CDT": ("America/Chicago",),
    "EDT": ("America/New_York",),
    "AKST": ("America/Anchorage",),
    "AKDT": ("America/Anchorage",),
    "HDT": ("Pacific/Honolulu",),
    "AST": ("America/Halifax",),
    "ADT": ("America/Halifax",),
    "NST": ("America/St_Johns",),
    "NDT": ("America/St_Johns",),
    "BRT": ("America/Sao_Paulo",),
    "ART": ("America/Argentina/Buenos_Aires",),
    "BST": ("Europe/London",),
    "IST": ("Asia/Kolkata", "Europe/Dublin", "Asia/Jerusalem"),
    "CEST": ("Europe/Berlin", "Europe/Paris", "Europe/Rome"),
    "WEST": ("Europe/Lisbon",),
    "EEST": ("Europe/Athens", "Europe/Helsinki"),
    "MSK": ("Europe/Moscow",),
    "SAST": ("Africa/Johannesburg",),
    "WAT": ("Africa/Lagos",),
    "CAT": ("Africa/Maputo",),
    "EAT": ("Africa/Nairobi",),
    "PKT": ("Asia/Karachi",),
    "ICT": ("Asia/Bangkok",),
    "WIB": ("Asia/Jakarta",),
    "SGT": ("Asia/Singapore",),
    "HKT": ("Asia/Hong_Kong",),
    "PHT": ("Asia/Manila",),
    "JST": ("Asia/Tokyo",),
    "KST": ("Asia/Seoul",),
    "AWST": ("Australia/Perth",),
    "ACST": ("Australia/Adelaide", "Australia/Darwin"),
    "ACDT": ("Australia/Adelaide",),
    "AEST": ("Australia/Sydney", "Australia/Brisbane"),
    "AEDT": ("Australia/Sydney",),
    "NZST": ("Pacific/Auckland",),
    "NZDT": ("Pacific/Auckland",),
}


#: tzdata zones spelled like abbreviations or POSIX rules, refused as input (see the docstring).
_LEGACY: Final[dict[str, tuple[str, ...]]] = {
    "EST": ("America/New_York",),
    "MST": ("America/Denver", "America/Phoenix"),
    "HST": ("Pacific/Honolulu",),
    "EST5EDT": ("America/New_York",),
    "CST6CDT": ("America/Chicago",),
    "MST7MDT": ("America/Denver",),
    "PST8PDT": ("America/Los_Angeles",),
    "CET": ("Europe/Berlin", "Europe/Paris", "Europe/Rome"),
    "MET": ("Europe/Berlin", "Europe/Paris", "Europe/Rome"),
    "EET": ("Europe/Athens", "Europe/Helsinki"),
    "WET": ("Europe/Lisbon",),
    # UK time, which GMT often stands for, has summer time; UTC is the fixed offset.
    "GMT": ("UTC", "Europe/London"),
    "GMT0": ("UTC", "Europe/London"),
    "GMT+0": ("UTC", "Europe/London"),
    "GMT-0": ("UTC", "Europe/London"),
    "GREENWICH": ("UTC", "Europe/London"),
}

#: Other spellings of UTC, stored as "UTC".
_UTC_NAMES: Final = frozenset(
    {
        "utc", "etc/utc", "uct", "etc/uct", "universal", "etc/universal", "zulu", "etc/zulu",
        "etc/gmt", "etc/gmt0", "etc/gmt+0", "etc/gmt-0", "etc/greenwich",
    }
)  # fmt: skip

#: Old names of zones (tzdata's "backward" links) stored under the current name. Other links
#: (Europe/Vatican, Asia/Istanbul, ...) are kept as given: they name a place of their own.
_RENAMED: Final[dict[str, str]] = {
    "US/Eastern": "America/New_York",
    "US/Central": "America/Chicago",
    "US/Mountain": "America/Denver",
    "US/Pacific": "America/Los_Angeles",
    "US/Alaska": "America/Anchorage",
    "US/Hawaii": "Pacific/Honolulu",
    "US/Arizona": "America/Phoenix",
    "US/East-Indiana": "America/Indiana/Indianapolis",
    "US/Indiana-Starke": "America/Indiana/Knox",
    "US/Michigan": "America/Detroit",
    "US/Aleutian": "America/Adak",
    "US/Samoa": "Pacific/Pago_Pago",
    "Canada/Atlantic": "America/Halifax",
    "Canada/Central": "America/Winnipeg",
    "Canada/Eastern": "America/Toronto",
    "Canada/Mountain": "America/Edmonton",
    "Canada/Newfoundland": "America/St_Johns",
    "Canada/Pacific": "America/Vancouver",
    "Canada/Saskatchewan": "America/Regina",
    "Canada/Yukon": "America/Whitehorse",
    "Asia/Calcutta": "Asia/Kolkata",
    "Asia/Saigon": "Asia/Ho_Chi_Minh",
    "Asia/Katmandu": "Asia/Kathmandu",
    "Asia/Rangoon": "Asia/Yangon",
    "Asia/Dacca": "Asia/Dhaka",
    "Asia/Thimbu": "Asia/Thimphu",
    "Asia/Ulan_Bator": "Asia/Ulaanbaatar",
    "Asia/Macao": "Asia/Macau",
    "Europe/Kiev": "Europe/Kyiv",
    "America/Godthab": "America/Nuuk",
}


@functools.cache
def _zone_names() -> dict[str, str]:
    """Lower-cased name -> canonical name of every zone tzdata knows (scanned once)."""
    return {name.lower(): name for name in available_timezones() if name not in _HOST_NAMES}


@functools.cache
def _cities() -> dict[str, list[str]]:
    """Lower-cased last path component -> zones, so 'Rome' can suggest 'Europe/Rome'."""
    cities: dict[str, list[str]] = {}
    for name in sorted(_zone_names().values()):
        if "/" in name:
            cities.setdefault(name.rsplit("/", 1)[1].lower(), []).append(name)
    return cities


def _quote_list(names: list[str] | tuple[str, ...]) -> str:
    """'A', 'B' or 'C'."""
    quoted = [f"'{name}'" for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def _did_you_mean(name: str) -> str:
    """' (did you mean ...?)' for close zone names, or an empty string."""
    city = name.replace(" ", "_").lower()
    matches = list(_cities().get(city, []))
    if not matches:
        lowered = difflib.get_close_matches(city, _zone_names(), n=1)
        matches = [_zone_names()[match] for match in lowered]
    return f" (did you mean {_quote_list(matches)}?)" if matches else ""


def _offset_advice(name: str) -> str | None:
    """Advice for names like 'UTC+5' or '-03:00', which are offsets, not zones."""
    match = _UTC_OFFSET.fullmatch(name)
    if match is None:
        return None
    sign, hours, minutes = match.groups()
    advice = f"{name!r} is a fixed UTC offset, not an IANA zone name; use a location name"
    if (minutes is None or int(minutes) == 0) and 0 < int(hours) <= 12:
        # The Etc/GMT zones use POSIX signs, inverted relative to ISO 8601.
        inverted = "-" if sign == "+" else "+"
        return f"{advice} such as {_EXAMPLE}, or 'Etc/GMT{inverted}{int(hours)}' (sign inverted)"
    return f"{advice} such as {_EXAMPLE}"


def _check_shape(name: str) -> None:
    """Reject empty, over-long and path-like names before they reach the file system."""
    if not name:
        raise ValueError(f"time zone name is empty; use an IANA name such as {_EXAMPLE} or 'UTC'")
    if len(name) > _MAX_NAME_LENGTH:
        raise ValueError(
            f"time zone name is too long ({len(name)} characters); "
            f"use an IANA name such as {_EXAMPLE}"
        )
    if ".." in name or name.startswith("/") or not _NAME_CHARS.fullmatch(name):
        raise ValueError(
            f"invalid time zone name {name!r}; IANA names look like 'Area/Location', "
            f"e.g. {_EXAMPLE}"
        )


def _rejection(name: str) -> str:
    """The message for a name that is not a zone."""
    if name in _HOST_NAMES:
        return f"{name!r} depends on the host's configuration; use an IANA name such as {_EXAMPLE}"
    offset_advice = _offset_advice(name)
    if offset_advice is not None:
        return offset_advice
    suggestions = _ABBREVIATIONS.get(name.upper())
    if suggestions is not None:
        return (
            f"{name!r} is a time zone abbreviation, not an IANA zone name; use a location "
            f"name such as {_quote_list(suggestions)}"
        )
    if _LOOKS_LIKE_ABBREVIATION.fullmatch(name) and name.upper() == name:
        return (
            f"{name!r} looks like a time zone abbreviation, not an IANA zone name; use a "
            f"location name such as {_EXAMPLE}{_did_you_mean(name)}"
        )
    return f"unknown time zone {name!r}; use an IANA name such as {_EXAMPLE}{_did_you_mean(name)}"


@functools.lru_cache(maxsize=1024)
def resolve_timezone(name: str) -> ZoneInfo:
    """Return the ZoneInfo for an IANA name (case-insensitive); raise ValueError with a fix."""
    name = name.strip()
    if _UTC_OFFSET.fullmatch(name) is None:
        _check_shape(name)
    canonical = _zone_names().get(name.lower())
    if canonical is None:
        raise ValueError(_rejection(name))
    try:
        return ZoneInfo(canonical)
    except (ZoneInfoNotFoundError, ValueError) as exc:  # listed but unreadable tzdata file
        raise ValueError(f"time zone {canonical!r} could not be loaded: {exc}") from exc


def canonical_timezone(name: str) -> str:
    """The input rule for a zone name: the name as rsched stores it, or ValueError with a fix.

    Case and blanks are forgiven (``europe/rome`` -> ``Europe/Rome``), spellings of UTC become
    ``UTC`` and renamed zones their current name (``US/Eastern`` -> ``America/New_York``,
    ``Asia/Calcutta`` -> ``Asia/Kolkata``). Abbreviations, including those tzdata keeps as
    legacy zones (``EST``, ``EST5EDT``, ``CET``, ``GMT``), are refused with the location zone
    to use instead.
    """
    if not isinstance(name, str):
        raise ValueError(f"give a time zone name such as {_EXAMPLE}, got {type(name).__name__}")
    stripped = name.strip()
    legacy = _LEGACY.get(stripped.upper())
    if legacy is not None:
        use = (
            "use 'UTC' for the fixed offset or 'Europe/London' for UK time"
            if legacy[0] == "UTC"
            else f"use a location name such as {_quote_list(legacy)}"
        )
        raise ValueError(
            f"{stripped!r} is a time zone abbreviation, not a location (tzdata keeps it only "
            f"for old systems); {use}"
        )
    zone = resolve_timezone(stripped)
    if stripped.lower() in _UTC_NAMES:
        return "UTC"
    renamed = _RENAMED.get(zone.key)
    if renamed is not None and renamed.lower() in _zone_names():
        return renamed
    return zone.key
