"""Time-zone names: accept IANA zones, reject abbreviations and typos with a suggested fix.

Abbreviations such as PST or CEST name an offset *and* a season, not a place, so they cannot
follow DST rules; users almost always mean a location zone. A few legacy names that look like
abbreviations (EST, MST, HST, CET, EET, ...) are real tzdata zones and are accepted as such.
"""

from __future__ import annotations

import difflib
import functools
import re
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

__all__ = ["resolve_timezone"]

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
