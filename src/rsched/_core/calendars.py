"""Exclusion calendars: named sets of days and periods in which a schedule's occurrences do not
run (``bank-holidays-it``), their stored form, and the reading of calendar files. Pure.

A calendar holds three kinds of entry, each read for one occurrence (an epoch ms) in the zone of
the schedule that names the calendar:

- ``dates``: days (``2026-12-25``); the occurrence's local date is one of them.
- ``weekdays``: ``mon`` .. ``sun``; the occurrence's local weekday is one of them.
- ``ranges``: periods, start inclusive, end exclusive. A bound without an offset (a day, or a
  datetime such as ``2026-12-24T14:00``) is a wall time in each schedule's zone, so one
  calendar of holidays serves schedules in Rome and in New York alike; a bound with an offset
  (``...+01:00``, ``...Z``) is one instant for every schedule. A day as the end of a range is
  inclusive (the end of that day): ``2026-12-24..2026-12-26`` is three whole days.

One range never mixes the two kinds of bound: whether its end came after its start would depend
on the schedule's zone, so it is refused with the fix.

:meth:`Calendar.excludes` runs on the scheduler's fire path, once per occurrence of every
schedule naming the calendar (a herd of 100k schedules may share one calendar and one due time):
the calendar is compiled once when built (ordinals, weekday numbers, sorted disjoint spans
searched by bisection) and the ms -> local time conversion is cached, since a herd shares its
times.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson

from rsched._core.errors import InvalidCalendar, StateError
from rsched._core.rules import check_name

WEEKDAYS: tuple[str, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: Most days one calendar holds (runs of consecutive days are better given as a range).
DATES_MAX = 10_000
#: Most ranges one calendar holds.
RANGES_MAX = 1_000
DESCRIPTION_MAX_CHARS = 2000
#: How many years an open-ended yearly rule of an iCalendar file is expanded to.
ICS_YEARS = 10

Bound = date | datetime
Range = tuple[Bound, Bound]

_WEEKDAY_NAMES = {
    **{short: short for short in WEEKDAYS},
    "monday": "mon", "tuesday": "tue", "wednesday": "wed", "thursday": "thu", "friday": "fri",
    "saturday": "sat", "sunday": "sun",
}  # fmt: skip
_DAY_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
# ISO 8601 extended form with at least hours and minutes; an offset or Z is optional.
_DATETIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_EPOCH_ORDINAL = _EPOCH_NAIVE.toordinal()
_DAY_MS = 86_400_000
_DAY_EXAMPLE = "give YYYY-MM-DD, e.g. '2026-12-25'"
_BOUND_EXAMPLE = (
    "give a day (YYYY-MM-DD) or a datetime (ISO 8601: '2026-12-24T14:00' in each schedule's "
    "zone, '2026-12-24T14:00+01:00' or '...Z' for one instant)"
)


@dataclass(frozen=True, slots=True)
class Calendar:
    """A named set of days and periods in which the occurrences of the schedules naming it do
    not run. Build one with :meth:`build`, which checks every field; ``updated_at`` is set by
    the store when the calendar is written."""

    name: str
    dates: tuple[date, ...] = ()
    ranges: tuple[Range, ...] = ()
    weekdays: tuple[str, ...] = ()
    description: str | None = None
    updated_at: datetime | None = None

    # The compiled form excludes() reads, built once in __post_init__: local day ordinals,
    # weekday numbers (Monday 0), and the ranges as sorted disjoint spans [start, end) in ms,
    # aware ones as epoch ms and naive ones as wall ms (the local wall time read as if UTC).
    _ordinals: frozenset[int] = field(init=False, repr=False, compare=False)
    _weekday_numbers: frozenset[int] = field(init=False, repr=False, compare=False)
    _instant_starts: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _instant_ends: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _wall_starts: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _wall_ends: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _reads_local: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        instants: list[tuple[int, int]] = []
        walls: list[tuple[int, int]] = []
        for start, end in self.ranges:
            if _is_aware(start) != _is_aware(end):
                raise InvalidCalendar(self.name, [("ranges", _MIXED)])
            (instants if _is_aware(start) else walls).append((_start_ms(start), _end_ms(end)))
        instant_starts, instant_ends = _disjoint(instants)
        wall_starts, wall_ends = _disjoint(walls)
        ordinals = frozenset(d.toordinal() for d in self.dates)
        weekday_numbers = frozenset(WEEKDAYS.index(w) for w in self.weekdays)
        setattr_ = object.__setattr__
        setattr_(self, "_ordinals", ordinals)
        setattr_(self, "_weekday_numbers", weekday_numbers)
        setattr_(self, "_instant_starts", instant_starts)
        setattr_(self, "_instant_ends", instant_ends)
        setattr_(self, "_wall_starts", wall_starts)
        setattr_(self, "_wall_ends", wall_ends)
        setattr_(self, "_reads_local", bool(ordinals or weekday_numbers or wall_starts))

    @classmethod
    def build(
        cls,
        name: str,
        *,
        dates: Iterable[date | str] = (),
        ranges: Iterable[Sequence[Bound | str] | str] = (),
        weekdays: Iterable[str] = (),
        description: str | None = None,
    ) -> Calendar:
        """A calendar from what a user gives: days as ``date`` or ``YYYY-MM-DD``, ranges as
        ``(start, end)`` pairs or ``"START..END"`` text (each bound a date, a datetime or their
        ISO text), weekdays as ``mon`` .. ``sun`` or full names in any case.

        Days are sorted and given once, weekdays kept in week order. Raises InvalidCalendar
        listing every problem, each by its field (``dates[3]``, ``ranges[0]``, ``name``).
        """
        return _build(name, dates, ranges, weekdays, description, bounded=True)

    def excludes(self, ms: int, tz: ZoneInfo) -> bool:
        """Whether the occurrence at ``ms`` (epoch milliseconds) of a schedule in zone ``tz``
        falls in this calendar."""
        if self._instant_starts and _within(self._instant_starts, self._instant_ends, ms):
            return True
        if not self._reads_local:
            return False
        ordinal, weekday, wall_ms = _local(ms, tz)
        return (
            ordinal in self._ordinals
            or weekday in self._weekday_numbers
            or (bool(self._wall_starts) and _within(self._wall_starts, self._wall_ends, wall_ms))
        )

    def to_json(self) -> str:
        """The stored form: JSON with only the non-empty fields (the name is the key's)."""
        doc: dict[str, Any] = {}
        if self.dates:
            doc["dates"] = [d.isoformat() for d in self.dates]
        if self.ranges:
            doc["ranges"] = [[a.isoformat(), b.isoformat()] for a, b in self.ranges]
        if self.weekdays:
            doc["weekdays"] = list(self.weekdays)
        if self.description:
            doc["description"] = self.description
        if self.updated_at is not None:
            doc["updated_at"] = (self.updated_at - _EPOCH) // _MS
        return orjson.dumps(doc).decode()

    @classmethod
    def from_json(cls, name: str, raw: str | bytes) -> Calendar:
        """The calendar stored under ``name``. Raises StateError naming it when the stored text
        is not a calendar rsched wrote. The limits on size are not applied again: a calendar
        written under them stays readable if they change."""
        try:
            doc = orjson.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError(f"a JSON {type(doc).__name__}, not an object")
            stamp = doc.get("updated_at")
            if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, int)):
                raise ValueError(f"updated_at is {stamp!r}, not a time in ms")
            for key in ("dates", "ranges", "weekdays"):
                if not isinstance(doc.get(key, []), list):
                    raise ValueError(f"{key} is not a JSON list")
            # Fields written by a newer rsched are left out rather than failing the read.
            calendar = _build(
                name,
                doc.get("dates", []),
                doc.get("ranges", []),
                doc.get("weekdays", []),
                doc.get("description"),
                bounded=False,
            )
        except (ValueError, TypeError) as exc:  # orjson.JSONDecodeError and InvalidCalendar too
            raise StateError(
                f"stored calendar {name!r} is not a calendar ({exc}); it was not written by this "
                "version of rsched or was edited by hand"
            ) from None
        if stamp is None:
            return calendar
        return dataclasses.replace(calendar, updated_at=_EPOCH + stamp * _MS)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: name, dates and ranges as ISO text, weekdays, description,
        updated_at (ISO 8601 or None)."""
        return {
            "name": self.name,
            "dates": [d.isoformat() for d in self.dates],
            "ranges": [[a.isoformat(), b.isoformat()] for a, b in self.ranges],
            "weekdays": list(self.weekdays),
            "description": self.description,
            "updated_at": None if self.updated_at is None else self.updated_at.isoformat(),
        }

    def merged(self, other: Calendar) -> Calendar:
        """Both calendars in one, under this one's name: every day, range and weekday of each,
        this one's description (the other's when it has none). ``updated_at`` is left unset for
        the store to write. Raises InvalidCalendar when the union is over a limit."""
        return _build(
            self.name,
            (*self.dates, *other.dates),
            (*self.ranges, *other.ranges),
            (*self.weekdays, *other.weekdays),
            self.description or other.description,
            bounded=True,
        )


def excluding(calendars: Sequence[Calendar], ms: int, tz: ZoneInfo) -> str | None:
    """The name of the first of ``calendars`` that excludes the occurrence at ``ms`` of a
    schedule in zone ``tz``, or None when none does."""
    for calendar in calendars:
        if calendar.excludes(ms, tz):
            return calendar.name
    return None


# --- checking what a user gives --------------------------------------------------------------

_MIXED = (
    "one bound has a UTC offset and the other has none; give both with an offset (one period "
    "for every schedule) or neither (wall times in each schedule's zone)"
)


def _build(
    name: object,
    dates: object,
    ranges: object,
    weekdays: object,
    description: object,
    *,
    bounded: bool,
) -> Calendar:
    errors: list[tuple[str, str]] = []
    try:
        check_name(name, "calendar name")
    except ValueError as exc:
        errors.append(("name", str(exc)))

    days: set[date] = set()
    for i, value in _items("dates", dates, "dates=['2026-12-25', '2026-12-26']", errors):
        try:
            days.add(_day(value))
        except ValueError as exc:
            errors.append((f"dates[{i}]", str(exc)))
    if bounded and len(days) > DATES_MAX:
        errors.append(
            (
                "dates",
                f"{len(days):,} days, over the {DATES_MAX:,} a calendar holds; give runs of "
                "consecutive days as ranges, or split them across calendars (a schedule may "
                "name several)",
            )
        )

    spans: dict[Range, None] = {}  # given order, each range once
    for i, value in _items("ranges", ranges, "ranges=['2026-12-24..2026-12-26']", errors):
        try:
            spans[_range(value)] = None
        except ValueError as exc:
            errors.append((f"ranges[{i}]", str(exc)))
    if bounded and len(spans) > RANGES_MAX:
        errors.append(
            (
                "ranges",
                f"{len(spans):,} ranges, over the {RANGES_MAX:,} a calendar holds; join "
                "overlapping ones, or split them across calendars (a schedule may name several)",
            )
        )

    chosen: set[str] = set()
    for i, value in _items("weekdays", weekdays, "weekdays=['sat', 'sun']", errors):
        short = _WEEKDAY_NAMES.get(value.strip().lower()) if isinstance(value, str) else None
        if short is None:
            errors.append(
                (
                    f"weekdays[{i}]",
                    f"{value!r} is not a weekday; give {', '.join(WEEKDAYS)} (or the full "
                    "name, e.g. 'saturday')",
                )
            )
        else:
            chosen.add(short)

    if description is not None and not isinstance(description, str):
        errors.append(("description", f"give text or None, got {type(description).__name__}"))
    elif bounded and description is not None and len(description) > DESCRIPTION_MAX_CHARS:
        errors.append(
            (
                "description",
                f"{len(description):,} characters, over the {DESCRIPTION_MAX_CHARS:,} allowed; "
                "shorten it",
            )
        )

    if errors:
        raise InvalidCalendar(name if isinstance(name, str) else None, errors)
    assert isinstance(name, str)  # checked above; for the type checker
    return Calendar(
        name,
        tuple(sorted(days)),
        tuple(spans),
        tuple(w for w in WEEKDAYS if w in chosen),
        (description or None) if isinstance(description, str) else None,
    )


def _items(
    what: str, value: object, example: str, errors: list[tuple[str, str]]
) -> list[tuple[int, Any]]:
    """The entries of a list field with their indexes; a lone string or a non-list is one error
    (a string is iterable, and its characters would make a baffling list of errors)."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        errors.append((what, f"give a list, e.g. {example}; got {value!r}"))
        return []
    return list(enumerate(value))


def _day(value: object) -> date:
    """A day of ``dates`` or of a plain calendar file."""
    if isinstance(value, datetime):
        raise ValueError(
            f"{value.isoformat()!r} is a time, not a day; give its day "
            f"({value.date().isoformat()!r}), or a range for part of a day"
        )
    if isinstance(value, date):
        return value
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a day; {_DAY_EXAMPLE}")
    text = value.strip()
    if _DATETIME_RE.match(text):
        raise ValueError(
            f"{text!r} is a time, not a day; give its day ({text[:10]!r}), or a range for part "
            "of a day ('2026-12-24T14:00..2026-12-25')"
        )
    if not _DAY_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not a day; {_DAY_EXAMPLE}")
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a day ({exc}); {_DAY_EXAMPLE}") from None


def _bound(value: object) -> Bound:
    """One bound of a range: a date or a datetime, or its ISO text."""
    if isinstance(value, date):  # datetime too
        return value
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a range bound; {_BOUND_EXAMPLE}")
    text = value.strip()
    if _DAY_RE.fullmatch(text):
        return _day(text)
    if _DATETIME_RE.match(text):
        try:
            return datetime.fromisoformat(text)
        except ValueError as exc:
            raise ValueError(f"{text!r} is not a datetime ({exc}); {_BOUND_EXAMPLE}") from None
    raise ValueError(f"{text!r} is not a range bound; {_BOUND_EXAMPLE}")


def _range(value: object) -> Range:
    """A range as ``(start, end)`` or ``"START..END"``; its end must come after its start."""
    if isinstance(value, str):
        parts: Sequence[object] = value.split("..")
        if len(parts) != 2:
            raise ValueError(
                f"{value!r} is not a range; give 'START..END', e.g. '2026-12-24..2026-12-26' "
                "(days, the end included) or '2026-12-24T14:00..2026-12-24T18:00'"
            )
    elif isinstance(value, Sequence) and not isinstance(value, bytes) and len(value) == 2:
        parts = value
    else:
        raise ValueError(
            f"{value!r} is not a range; give (start, end) or 'START..END', e.g. "
            "'2026-12-24..2026-12-26'"
        )
    start, end = _bound(parts[0]), _bound(parts[1])
    _check_order(start, end)
    return start, end


def _check_order(start: Bound, end: Bound) -> None:
    if _is_aware(start) != _is_aware(end):
        raise ValueError(_MIXED)
    if _end_ms(end) > _start_ms(start):
        return
    shown = f"{start.isoformat()}..{end.isoformat()}"
    # Only a time can end exactly at the start; a day as the end ends at the next midnight.
    if _end_ms(end) == _start_ms(start) and isinstance(end, datetime):
        raise ValueError(
            f"{shown} ends when it starts, so it excludes nothing; give an end after the start "
            "(a day as the end is included: '2026-12-24..2026-12-24' is that whole day)"
        )
    raise ValueError(f"{shown} ends before it starts; give the start first")


# --- the compiled form ----------------------------------------------------------------------


def _is_aware(bound: Bound) -> bool:
    return isinstance(bound, datetime) and bound.utcoffset() is not None


def _start_ms(bound: Bound) -> int:
    """A range's start in ms: epoch ms when aware, wall ms (read as if UTC) when naive; a day
    starts at its midnight. Rounded up: an occurrence counts from the first whole ms on."""
    if not isinstance(bound, datetime):
        return (bound.toordinal() - _EPOCH_ORDINAL) * _DAY_MS
    epoch = _EPOCH if _is_aware(bound) else _EPOCH_NAIVE
    return -((epoch - bound) // _MS)


def _end_ms(bound: Bound) -> int:
    """A range's end, exclusive, in ms; a day as an end is included, so it ends at the next
    midnight (by ordinals, which also serve 9999-12-31)."""
    if not isinstance(bound, datetime):
        return (bound.toordinal() + 1 - _EPOCH_ORDINAL) * _DAY_MS
    return _start_ms(bound)


def _disjoint(spans: list[tuple[int, int]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Spans merged into sorted, disjoint ones, as their starts and their ends: one bisection
    then answers whether a time is in any of them."""
    starts: list[int] = []
    ends: list[int] = []
    for start, end in sorted(spans):
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return tuple(starts), tuple(ends)


def _within(starts: tuple[int, ...], ends: tuple[int, ...], at: int) -> bool:
    i = bisect_right(starts, at) - 1
    return i >= 0 and at < ends[i]


@functools.lru_cache(maxsize=4096)
def _local(ms: int, tz: ZoneInfo) -> tuple[int, int, int]:
    """The occurrence at ``ms`` in ``tz``: its local day's ordinal, weekday (Monday 0) and wall
    ms. Cached: the schedules of a herd share their due time and zone, and each of their
    calendars asks."""
    local = (_EPOCH + ms * _MS).astimezone(tz)
    offset = local.utcoffset()
    wall_ms = ms + (0 if offset is None else offset // _MS)
    return local.toordinal(), local.weekday(), wall_ms


# --- calendar files ---------------------------------------------------------------------------


def parse_calendar_file(
    text: str, *, source: str = "file", today: date | None = None
) -> tuple[list[date], list[Range], str | None]:
    """The days, ranges and description of a calendar file: an iCalendar file (RFC 5545, told
    by its first line ``BEGIN:VCALENDAR``) or a plain one.

    A plain file holds one entry a line: a day (``2026-12-25``) or a range (``START..END``, read
    as in :meth:`Calendar.build`); ``#`` starts a comment, blank lines are skipped. Its
    description is None.

    Of an iCalendar file, the events (VEVENT) are read: all-day ones as days (several days as a
    range, its end included), timed ones as ranges (UTC, TZID or floating times; DTEND or
    DURATION; one without either is an instant and excludes nothing). A yearly RRULE on an
    all-day event is expanded (to UNTIL, COUNT, or ``ICS_YEARS`` years after DTSTART, or after
    ``today`` when given and later: a holiday feed's DTSTART is often decades back), less its
    EXDATEs and the occurrences moved by a RECURRENCE-ID; RDATE days of all-day events are
    added. Cancelled events, other components and unknown properties are skipped. The
    description is X-WR-CALNAME.

    Raises InvalidCalendar (``source`` names the file) listing each problem by line.
    """
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    first = next((line.strip() for line in lines if line.strip()), "")
    if first.upper() == "BEGIN:VCALENDAR":
        return _Ics(lines, today).read(source)
    return _read_plain(lines, source)


def _read_plain(lines: list[str], source: str) -> tuple[list[date], list[Range], str | None]:
    days: list[date] = []
    spans: list[Range] = []
    errors: list[tuple[str, str]] = []
    for number, line in enumerate(lines, 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            if ".." in entry:
                spans.append(_range(entry))
            else:
                days.append(_day(entry))
        except ValueError as exc:
            errors.append((f"line {number}", str(exc)))
    if errors:
        raise InvalidCalendar(None, errors, source=source)
    return days, spans, None


@dataclass(slots=True)
class _Property:
    """One content line of an iCalendar file: ``NAME;PARAM=VALUE:value`` at line ``line``."""

    name: str
    params: dict[str, str]
    value: str
    line: int


_ICS_DATE = re.compile(r"(\d{4})(\d{2})(\d{2})")
_ICS_DATETIME = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(Z?)", re.IGNORECASE)
_ICS_DURATION = re.compile(
    r"([+-]?)P(?:(\d+)W|(?:(\d+)D)?(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?)", re.IGNORECASE
)
_ICS_NAME = re.compile(r"[A-Za-z0-9-]+")
_YEARLY_ONLY = (
    "only yearly rules on all-day events are read (FREQ=YEARLY, with COUNT or UNTIL); expand "
    "the recurring event into single events in the calendar it comes from"
)


class _Ics:
    """One reading of an iCalendar file: its days, ranges and problems as they are found."""

    def __init__(self, lines: list[str], today: date | None) -> None:
        self.lines = lines
        self.today = today
        self.days: list[date] = []
        self.spans: list[Range] = []
        self.errors: list[tuple[str, str]] = []
        self.description: str | None = None
        # All-day events: UID, the days its occurrences start on, their length in days, and
        # whether it is itself a moved occurrence (it has a RECURRENCE-ID). The occurrences
        # (UID, day) moved elsewhere are dropped from their recurring event once all are read.
        self.all_day: list[tuple[str | None, list[date], int, bool]] = []
        self.moved: set[tuple[str | None, date]] = set()

    def read(self, source: str) -> tuple[list[date], list[Range], str | None]:
        stack: list[tuple[str, int]] = []
        event: list[_Property] = []
        last = 0
        for number, text in _unfold(self.lines):
            last = number
            prop = self._content_line(number, text)
            if prop is None:
                continue
            if prop.name == "BEGIN":
                kind = prop.value.strip().upper()
                stack.append((kind, number))
                if kind == "VEVENT" and [k for k, _ in stack] == ["VCALENDAR", "VEVENT"]:
                    event = []
            elif prop.name == "END":
                kind = prop.value.strip().upper()
                if not stack or stack[-1][0] != kind:
                    opened = f"{stack[-1][0]} (line {stack[-1][1]})" if stack else "nothing"
                    self.errors.append(
                        (
                            f"line {number}",
                            f"END:{kind} closes {opened}; is the file edited by hand?",
                        )
                    )
                    continue
                if [k for k, _ in stack] == ["VCALENDAR", "VEVENT"]:
                    self._event(stack[-1][1], event)
                stack.pop()
            elif [k for k, _ in stack] == ["VCALENDAR", "VEVENT"]:
                event.append(prop)
            elif [k for k, _ in stack] == ["VCALENDAR"] and prop.name == "X-WR-CALNAME":
                self.description = _unescape(prop.value).strip() or None
        if stack:
            inside, began = stack[-1]
            self.errors.append(
                (
                    f"line {last}",
                    f"the file ends inside {inside} (opened at line {began}); is it cut short?",
                )
            )
        for uid, starts, span, is_moved in self.all_day:
            for day in starts:
                if is_moved or (uid, day) not in self.moved:
                    self._add_days(day, span)
        if self.errors:
            raise InvalidCalendar(None, self.errors, source=source)
        return self.days, self.spans, self.description

    def _content_line(self, number: int, text: str) -> _Property | None:
        if not text.strip():
            return None
        # The name and parameters end at the first ':' outside quotes (a quoted parameter
        # value may hold ':' and ';').
        in_quotes = False
        head: list[str] = [""]
        colon = -1
        for at, char in enumerate(text):
            if char == '"':
                in_quotes = not in_quotes
            elif not in_quotes and char == ":":
                colon = at
                break
            elif not in_quotes and char == ";":
                head.append("")
                continue
            head[-1] += char
        if colon < 0:
            self.errors.append(
                (
                    f"line {number}",
                    f"{text[:40]!r} is not an iCalendar line (NAME:value); is the file cut or "
                    "edited by hand?",
                )
            )
            return None
        name = head[0].strip()
        if not _ICS_NAME.fullmatch(name):
            self.errors.append((f"line {number}", f"{name!r} is not an iCalendar property name"))
            return None
        params: dict[str, str] = {}
        for param in head[1:]:
            key, _, value = param.partition("=")
            params[key.strip().upper()] = value.strip().strip('"')
        return _Property(name.upper(), params, text[colon + 1 :], number)

    def _event(self, began: int, props: list[_Property]) -> None:
        """One VEVENT (begun at line ``began``): its days or its range, or its problems."""
        first = {p.name: p for p in reversed(props)}
        status = first.get("STATUS")
        if status is not None and status.value.strip().upper() == "CANCELLED":
            return
        dtstart = first.get("DTSTART")
        if dtstart is None:
            self.errors.append((f"line {began}", "the event has no DTSTART; give its start"))
            return
        uid_prop = first.get("UID")
        uid = uid_prop.value.strip() if uid_prop is not None else None
        try:
            start = _ics_time(dtstart)
            moved = first.get("RECURRENCE-ID")
            if moved is not None:
                self.moved.add((uid, _as_day(_ics_time(moved))))
            if isinstance(start, datetime):
                self._timed(start, first)
            else:
                self._all_day(uid, start, first, props, is_moved=moved is not None)
        except InvalidCalendar as problem:
            self.errors += problem.errors

    def _timed(self, start: datetime, first: dict[str, _Property]) -> None:
        for name in ("RRULE", "RDATE"):
            if name in first:
                raise _problem(
                    first[name].line, f"{name} on a timed event is not read: {_YEARLY_ONLY}"
                )
        dtend, duration = first.get("DTEND"), first.get("DURATION")
        if dtend is not None:
            end = _ics_time(dtend)
            if not isinstance(end, datetime):
                raise _problem(
                    dtend.line,
                    "DTEND is a day but DTSTART a time; give both as times or both as days",
                )
            if _is_aware(start) != _is_aware(end):
                raise _problem(
                    dtend.line,
                    "one of DTSTART and DTEND is floating (no Z or TZID) and the other is not; "
                    "give both in UTC or a TZID, or both floating",
                )
            where = dtend.line
        elif duration is not None:
            end = start + _ics_duration(duration)
            where = duration.line
        else:
            return  # an instant: it excludes no occurrence
        if end == start:
            return
        if end < start:
            raise _problem(where, "the event ends before it starts; give the start first")
        self.spans.append((start, end))

    def _all_day(
        self,
        uid: str | None,
        start: date,
        first: dict[str, _Property],
        props: list[_Property],
        *,
        is_moved: bool,
    ) -> None:
        dtend, duration = first.get("DTEND"), first.get("DURATION")
        days = 1
        if dtend is not None:
            end = _ics_time(dtend)
            if isinstance(end, datetime):
                raise _problem(
                    dtend.line, "DTEND is a time but DTSTART a day; give both as days (VALUE=DATE)"
                )
            if end < start:
                raise _problem(dtend.line, "the event ends before it starts; give the start first")
            # DTEND is exclusive; some writers give the day itself for a one-day event.
            days = max(1, (end - start).days)
        elif duration is not None:
            length = _ics_duration(duration)
            if length % timedelta(days=1):
                raise _problem(
                    duration.line,
                    f"DURATION {duration.value.strip()} is not whole days, as an all-day event's "
                    "is (P1D, P2W)",
                )
            days = length.days
            if days == 0:
                return
        starts = [start]
        rule = first.get("RRULE")
        if rule is not None:
            starts = self._yearly(start, rule)
        for prop in props:
            if prop.name == "RDATE":
                starts += [_as_day(t) for t in _ics_times(prop)]
        dropped = {_as_day(t) for p in props if p.name == "EXDATE" for t in _ics_times(p)}
        kept = sorted({d for d in starts if d not in dropped})
        self.all_day.append((uid, kept, days, is_moved))

    def _yearly(self, start: date, prop: _Property) -> list[date]:
        parts: dict[str, str] = {}
        for part in prop.value.strip().split(";"):
            key, _, value = part.partition("=")
            parts[key.strip().upper()] = value.strip().upper()
        if parts.get("FREQ") != "YEARLY":
            raise _problem(prop.line, f"RRULE {prop.value.strip()!r} is not read: {_YEARLY_ONLY}")
        implied = {
            "FREQ": "YEARLY",
            "INTERVAL": "1",
            "BYMONTH": str(start.month),
            "BYMONTHDAY": str(start.day),
        }
        for key, value in parts.items():
            if key in ("COUNT", "UNTIL", "WKST"):
                continue
            if implied.get(key) != value.lstrip("0"):
                raise _problem(
                    prop.line, f"RRULE {prop.value.strip()!r} is not read: {_YEARLY_ONLY}"
                )
        count: int | None = None
        if "COUNT" in parts:
            if not parts["COUNT"].isdigit() or int(parts["COUNT"]) < 1:
                raise _problem(
                    prop.line, f"RRULE COUNT={parts['COUNT']} is not a whole number above 0"
                )
            count = int(parts["COUNT"])
        until: date | None = None
        if "UNTIL" in parts:
            until = _as_day(_ics_value(prop.line, parts["UNTIL"], {}))
        base = start if self.today is None or self.today < start else self.today
        last_year = base.year + ICS_YEARS
        out: list[date] = []
        for year in range(start.year, last_year + 1):
            if count is not None and len(out) >= count:
                break
            try:
                day = start.replace(year=year)
            except ValueError:  # 29 February in a common year: no occurrence (RFC 5545)
                continue
            if until is not None and day > until:
                break
            out.append(day)
        return out

    def _add_days(self, day: date, days: int) -> None:
        if days == 1:
            self.days.append(day)
        else:
            self.spans.append((day, day + timedelta(days=days - 1)))


def _problem(line: int, message: str) -> InvalidCalendar:
    """A problem with one property of an event; the reading goes on with the next event."""
    return InvalidCalendar(None, [(f"line {line}", message)])


def _unfold(lines: list[str]) -> list[tuple[int, str]]:
    """Logical lines with the number of their first physical line: a line starting with a
    space or a tab continues the one before (RFC 5545 3.1), less that one character."""
    out: list[tuple[int, str]] = []
    for number, line in enumerate(lines, 1):
        if line[:1] in (" ", "\t") and out:
            out[-1] = (out[-1][0], out[-1][1] + line[1:])
        else:
            out.append((number, line))
    return out


def _unescape(text: str) -> str:
    """An iCalendar TEXT value as written (``\\,`` ``\\;`` ``\\n`` ``\\\\``)."""
    return re.sub(r"\\([\\;,nN])", lambda m: "\n" if m.group(1) in "nN" else m.group(1), text)


def _ics_time(prop: _Property) -> date | datetime:
    values = _ics_times(prop)
    if len(values) != 1:
        raise _problem(prop.line, f"{prop.name} holds {len(values)} values; give one")
    return values[0]


def _ics_times(prop: _Property) -> list[date | datetime]:
    """The dates or date-times of a property (EXDATE and RDATE may hold several, by commas)."""
    kind = prop.params.get("VALUE", "").upper()
    if kind not in ("", "DATE", "DATE-TIME"):
        raise _problem(prop.line, f"{prop.name};VALUE={kind} is not read; give dates or times")
    return [
        _ics_value(prop.line, v.strip(), prop.params) for v in prop.value.split(",") if v.strip()
    ]


def _ics_value(line: int, value: str, params: dict[str, str]) -> date | datetime:
    day = _ICS_DATE.fullmatch(value)
    moment = _ICS_DATETIME.fullmatch(value)
    try:
        if day:
            return date(*map(int, day.groups()))
        if moment:
            year, month, mday, hour, minute, second = (int(g) for g in moment.groups()[:6])
            naive = datetime(year, month, mday, hour, minute, second)
            if moment.group(7):  # Z
                return naive.replace(tzinfo=UTC)
            tzid = params.get("TZID")
            return naive if tzid is None else naive.replace(tzinfo=_ics_zone(line, tzid))
    except ValueError as exc:
        raise _problem(line, f"{value!r} is not a date or time ({exc})") from None
    raise _problem(
        line, f"{value!r} is not an iCalendar date (20261225) or time (20261225T090000, ...Z)"
    )


def _ics_zone(line: int, tzid: str) -> ZoneInfo:
    try:
        return ZoneInfo(tzid)
    except (ZoneInfoNotFoundError, ValueError):
        raise _problem(
            line,
            f"TZID {tzid!r} is not an IANA time zone (such as 'Europe/Rome'); change it in the "
            "calendar it comes from, or export the times in UTC",
        ) from None


def _ics_duration(prop: _Property) -> timedelta:
    match = _ICS_DURATION.fullmatch(prop.value.strip())
    if match is None or match.group(0).upper() in ("P", "+P", "-P"):
        raise _problem(
            prop.line, f"DURATION {prop.value.strip()!r} is not a duration (e.g. PT2H, P1D, P1W)"
        )
    sign, weeks, days, hours, minutes, seconds = match.groups()
    if sign == "-":
        raise _problem(prop.line, f"DURATION {prop.value.strip()} is negative; give the length")
    return timedelta(
        weeks=int(weeks or 0),
        days=int(days or 0),
        hours=int(hours or 0),
        minutes=int(minutes or 0),
        seconds=int(seconds or 0),
    )


def _as_day(value: date | datetime) -> date:
    return value.date() if isinstance(value, datetime) else value
