"""Cron expressions: parsing with field-specific errors and DST-correct evaluation.

Why cronsim and not croniter
----------------------------
croniter 7.0.0 fires a fall-back example such as ``30 1 * * *`` in America/New_York twice on
2026-11-01 (01:30 EDT and again at 01:30 EST) and is slower (~70 µs against ~14 µs per fresh
next-time in its authors' numbers). cronsim follows Debian/Vixie cron, is small and typed. On
this host a fresh ``next(CronSim(...))`` costs 40-370 µs, so results are cached (see below).

DST rules (Debian/Vixie cron)
-----------------------------
* *Fixed* expressions (no ``*`` and no ``/`` in the second, minute and hour fields) are about
  wall-clock times. They are iterated in naive local time and each wall time is mapped to one
  instant: a wall time inside a spring-forward gap fires once, at the transition instant (the
  first real instant after the gap, e.g. ``30 2 * * *`` in New York on 2026-03-08 fires at
  03:00:00 EDT, and so does ``15 30 2 * * *``); a wall time in a repeated fall-back hour fires
  once, at its first (fold=0) occurrence.
* Every other expression follows real elapsed time: each instant whose local wall-clock
  reading matches fires, so ``*/15 * * * *`` fires through both passes of a repeated hour and
  wall times inside a gap simply never occur.

Chosen rules (``dst_gap``, ``dst_fold``)
---------------------------------------
A schedule may choose otherwise for its gaps (``shift``: at the first instant after the gap, as
fixed expressions do; ``skip``: no run, as the others do) and its folds (``first``, ``last`` or
``both`` passes). Cron's rule above is ``shift``/``first`` for fixed expressions and
``skip``/``both`` for the rest; :meth:`Cron.rule` maps a choice equal to it to None, so such
schedules keep the paths above. Any other choice is evaluated the elapsed way, one constant-offset
segment at a time, with two additions: a segment that starts after a gap also fires at its first
instant (the gap's end) when a wall time inside the gap matches (``shift``), and a match in the
pass of a repeated hour the rule leaves out (the second for ``first``, the first for ``last``)
makes the search jump past that pass.

What we work around in cronsim
------------------------------
cronsim only applies its Debian-style DST fix-up to 5-field expressions with aware datetimes,
and with aware datetimes it mishandles zones whose shift is not a whole hour: for
``0 */10 3 * * *`` in Australia/Lord_Howe on 2026-10-04 it returns 03:30 LHDT, skipping
03:00-03:20. We therefore only ever give cronsim naive datetimes and the 6-field form, and do
the time-zone arithmetic here: fixed expressions map naive wall times to instants as above;
elapsed expressions are evaluated one constant-UTC-offset segment at a time.

Results are cached per (fields, zone, whole second), because occurrences fall on whole
seconds: the answer for ``after`` only depends on ``after`` truncated to the second.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, NoReturn
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from rsched._core.errors import CronError
from rsched._core.rules import DstFold, DstGap, check_dst_fold, check_dst_gap

__all__ = ["Cron", "DstRule"]

_SECOND: Final = timedelta(seconds=1)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE: Final = datetime(1970, 1, 1)
# Any start works for the never-fires probe; a fixed one keeps parse() deterministic.
_PROBE_START: Final = datetime(2000, 1, 1)
# Must stay below the smallest gap between two UTC-offset changes of one zone, so that a
# probe window holds at most one change. In tzdata that gap is ~4 days (Africa/Freetown, 1939)
# and ~7 days since 1970.
_OFFSET_PROBE_STEP: Final = 2 * 86_400
# Each loop iteration crosses one offset change; cronsim itself gives up after 50 years.
_MAX_SEGMENTS: Final = 256
_MAX_SKIPS: Final = 10_000
_CACHE_SIZE: Final = 65_536

_SHORTCUTS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIVE_FIELDS_HINT: Final = (
    "use 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, "
    "or a shortcut like @daily"
)
_MONTH_NAMES: Final = (
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
)  # fmt: skip
_DOW_NAMES: Final = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# Not calendar.month_name: that one follows the process locale.
_MONTH_LONG: Final = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
_DAYS_IN_MONTH: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True, slots=True)
class _Field:
    """How to read one cron field: its name, bounds and optional symbolic names."""

    name: str
    lo: int
    hi: int
    names: tuple[str, ...] = ()
    names_base: int = 0

    def bounds(self) -> str:
        """Describe the accepted values, e.g. '1-12 or JAN-DEC'."""
        text = f"{self.lo}-{self.hi}"
        if self.names:
            text += f" or {self.names[0]}-{self.names[-1]}"
        return text


_SECOND_F: Final = _Field("second", 0, 59)
_MINUTE_F: Final = _Field("minute", 0, 59)
_HOUR_F: Final = _Field("hour", 0, 23)
_DOM_F: Final = _Field("day-of-month", 1, 31)
_MONTH_F: Final = _Field("month", 1, 12, _MONTH_NAMES, 1)
_DOW_F: Final = _Field("day-of-week", 0, 7, _DOW_NAMES, 0)
_FIELDS: Final = (_SECOND_F, _MINUTE_F, _HOUR_F, _DOM_F, _MONTH_F, _DOW_F)


def _fail(text: str, message: str) -> NoReturn:
    """Raise the error for `text`, prefixed with the expression so logs show which one."""
    raise CronError(f"cron {text!r}: {message}")


# --------------------------------------------------------------------------- parsing


def _value(text: str, field: _Field, raw: str) -> int:
    """Read one number or name of `field`."""
    if raw.isascii() and raw.isdigit():
        number = int(raw)
        if not field.lo <= number <= field.hi:
            _fail(text, f"{field.name} must be {field.bounds()}, got {raw!r}")
        return number
    if raw in field.names:
        return field.names.index(raw) + field.names_base
    if raw == "?":
        _fail(text, f"'?' is not supported in the {field.name} field; use '*'")
    if field is _DOM_F and raw.endswith("W"):
        _fail(text, "the nearest-weekday form (e.g. 15W) is not supported; only LW is")
    _fail(text, f"{field.name} must be {field.bounds()}, got {raw!r}")


def _range(text: str, field: _Field, term: str) -> set[int]:
    """Read '*', 'a' or 'a-b' (the part of a term before any '/')."""
    if term == "*":
        return set(range(field.lo, field.hi + 1))
    if "-" not in term:
        return {_value(text, field, term)}
    start_raw, end_raw = term.split("-", 1)
    start, end = _value(text, field, start_raw), _value(text, field, end_raw)
    if end < start:
        _fail(
            text,
            f"{field.name} range {term!r} runs backwards; write the smaller value first "
            "(ranges do not wrap around)",
        )
    return set(range(start, end + 1))


def _stepped(text: str, field: _Field, term: str) -> set[int]:
    """Read 'base/step' the way cronsim does: a single start value means start-to-max."""
    base, step_raw = term.split("/", 1)
    if not (step_raw.isascii() and step_raw.isdigit()):
        _fail(text, f"{field.name} step must be a whole number, got {step_raw!r}")
    step = int(step_raw)
    if step < 1:
        _fail(text, f"{field.name} step must be at least 1")
    values = _range(text, field, base)
    if base != "*" and "-" not in base:
        values = set(range(min(values), field.hi + 1))
    return set(sorted(values)[::step])


def _dow_special(text: str, term: str) -> set[int]:
    """Read 'nL' (last weekday n of the month) or 'n#k' (k-th weekday n)."""
    if "#" in term:
        day_raw, nth_raw = term.split("#", 1)
        day = _value(text, _DOW_F, day_raw)
        if not (nth_raw.isascii() and nth_raw.isdigit() and 1 <= int(nth_raw) <= 5):
            _fail(text, f"day-of-week occurrence in {term!r} must be 1-5, e.g. MON#2")
        return {day}
    day_raw = term[:-1]
    if not (day_raw.isascii() and day_raw.isdigit()):
        _fail(
            text,
            f"day-of-week {term!r}: put a weekday number 0-7 before L, e.g. 5L for the "
            "last Friday of the month",
        )
    return {_value(text, _DOW_F, day_raw)}


def _term(text: str, field: _Field, term: str) -> set[int]:
    """Validate one comma-separated term and return the plain numbers it names."""
    if term == "":
        _fail(text, f"{field.name} has an empty list item; remove the extra comma")
    if field is _DOM_F and term in ("L", "LW"):
        return set()
    if field is _DOW_F and ("#" in term or term.endswith("L")):
        return _dow_special(text, term)
    if "L" in term and field in (_DOM_F, _DOW_F):
        _fail(text, f"{field.name} {term!r}: L cannot be combined with ranges or steps")
    if "#" in term:
        _fail(text, f"'#' is only allowed in the day-of-week field, e.g. MON#2; got {term!r}")
    if "/" in term:
        return _stepped(text, field, term)
    return _range(text, field, term)


def _field_values(text: str, field: _Field, spec: str) -> set[int]:
    """Validate a whole field and return the plain numbers it names."""
    values: set[int] = set()
    for term in spec.split(","):
        values |= _term(text, field, term)
    return values


def _normalize(text: str) -> list[str]:
    """Expand shortcuts and return the six upper-cased fields, seconds first."""
    if not text:
        raise CronError(f"cron expression is empty; {_FIVE_FIELDS_HINT}")
    if text.startswith("@"):
        shortcut = text.lower()
        if shortcut == "@reboot":
            _fail(
                text,
                "@reboot is not supported (a scheduler has no boot); use a time-based "
                "shortcut such as @daily or a 5-field expression",
            )
        if shortcut not in _SHORTCUTS:
            _fail(text, f"unknown shortcut; use one of {', '.join(_SHORTCUTS)}")
        text = _SHORTCUTS[shortcut]
    parts = text.upper().split()
    if len(parts) not in (5, 6):
        extra = " (a year field is not supported)" if len(parts) == 7 else ""
        raise CronError(f"cron {text!r} has {len(parts)} fields{extra}; {_FIVE_FIELDS_HINT}")
    if len(parts) == 5:
        parts.insert(0, "0")
    return parts


def _check_days_exist(text: str, parts: list[str], days: set[int], months: set[int]) -> None:
    """Reject day-of-month values that no selected month has, when days must match both."""
    dom, dow = parts[3], parts[5]
    # Vixie cron: a field starting with '*' turns the dom/dow "OR" into an "AND".
    day_and = dom.startswith("*") or dow.startswith("*")
    if not day_and or "L" in dom or not days:
        return
    if min(days) > max(_DAYS_IN_MONTH[m - 1] for m in months):
        names = [_MONTH_LONG[m - 1] for m in sorted(months)]
        in_months = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        _fail(
            text,
            f"day-of-month {dom} never occurs in {in_months}, so the expression can never fire",
        )


def _validate(text: str, parts: list[str]) -> None:
    """Raise a field-specific error for anything cronsim would reject or never fire."""
    values = [_field_values(text, f, spec) for f, spec in zip(_FIELDS, parts, strict=True)]
    _check_days_exist(text, parts, values[3], values[4])
    fields = " ".join(parts)
    try:
        next(CronSim(fields, _PROBE_START))
    except CronSimError as exc:  # our checks should have caught it first
        _fail(text, f"{exc}; {_FIVE_FIELDS_HINT}")
    except StopIteration:
        _fail(
            text,
            "no date matches the day-of-month, month and day-of-week fields together "
            "(checked 50 years), so the expression can never fire",
        )


# --------------------------------------------------------------------------- time zones


def _offset_of(local: datetime) -> int:
    """UTC offset of an aware datetime, in whole seconds."""
    offset = local.utcoffset()
    if offset is None:
        raise ValueError("time zone has no UTC offset")
    return offset // _SECOND


def _offset(tz: ZoneInfo, t: int) -> int:
    """UTC offset of `tz` at epoch second `t`."""
    return _offset_of(datetime.fromtimestamp(t, tz))


def _wall(t: int, offset: int) -> datetime:
    """Naive wall-clock reading of epoch second `t` under `offset`."""
    return _EPOCH_NAIVE + timedelta(seconds=t + offset)


def _instant(wall: datetime, offset: int) -> int:
    """Epoch second whose reading under `offset` is `wall`."""
    return (wall - _EPOCH_NAIVE) // _SECOND - offset


def _bisect_change(tz: ZoneInfo, lo: int, hi: int, lo_offset: int) -> int:
    """First second in (lo, hi] whose offset differs from lo's; hi's must differ."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset(tz, mid) == lo_offset:
            lo = mid
        else:
            hi = mid
    return hi


def _first_change(tz: ZoneInfo, lo: int, hi: int, offset: int) -> int | None:
    """Earliest second in (lo, hi] whose offset differs from `offset` (the offset at lo)."""
    lower = lo
    while lower < hi:
        probe = min(lower + _OFFSET_PROBE_STEP, hi)
        if _offset(tz, probe) != offset:
            return _bisect_change(tz, lower, probe, offset)
        lower = probe
    return None


def _last_change(tz: ZoneInfo, lo: int, hi: int, offset: int) -> int | None:
    """Latest second in [lo, hi) whose offset differs from `offset` (the offset at hi)."""
    upper = hi
    while upper > lo:
        probe = max(upper - _OFFSET_PROBE_STEP, lo)
        probe_offset = _offset(tz, probe)
        if probe_offset != offset:
            return _bisect_change(tz, probe, upper, probe_offset) - 1
        upper = probe
    return None


def _wall_to_instant(tz: ZoneInfo, wall: datetime) -> int:
    """Map a wall time to the instant a fixed expression fires (Debian cron rules)."""
    local = wall.replace(tzinfo=tz, fold=0)
    before = _offset_of(local)
    after = _offset_of(local.replace(fold=1))
    if before >= after:
        # Normal, or repeated hour: fold=0 is the first occurrence.
        return _instant(wall, before)
    # In a gap zoneinfo reads fold=0 with the old offset and fold=1 with the new one, so the
    # transition lies between those two readings; fire exactly at it.
    change = _first_change(tz, _instant(wall, after), _instant(wall, before), before)
    return change if change is not None else _instant(wall, before)


def _repeat_end(tz: ZoneInfo, t: int) -> datetime | None:
    """If `t` is in the second pass of a repeated hour, the wall time that pass ends at."""
    local = datetime.fromtimestamp(t, tz)
    if not local.fold:
        return None
    first = _offset_of(local.replace(fold=0))
    second = _offset_of(local)
    change = _first_change(tz, t - (first - second), t, first)
    if change is None:
        return None
    # The repeated wall times end where the old offset's reading of the change begins.
    return _wall(change, first)


def _local_wall(tz: ZoneInfo, t: int) -> datetime:
    """Naive wall-clock reading of epoch second `t` in `tz`."""
    return datetime.fromtimestamp(t, tz).replace(tzinfo=None, fold=0)


# --------------------------------------------------------------------------- evaluation


def _fixed_next(fields: str, tz: ZoneInfo, after: int) -> int | None:
    """First firing instant > `after` of a wall-clock (fixed) expression."""
    repeat_end = _repeat_end(tz, after)
    # Wall times of the repeated hour already fired in its first pass, so skip past them.
    start = repeat_end - _SECOND if repeat_end is not None else _local_wall(tz, after)
    walls = CronSim(fields, start)
    for _ in range(_MAX_SKIPS):
        candidate = _wall_to_instant(tz, next(walls))
        if candidate > after:
            return candidate
    return None


def _fixed_prev(fields: str, tz: ZoneInfo, at: int) -> int | None:
    """Latest firing instant <= `at` of a wall-clock (fixed) expression."""
    repeat_end = _repeat_end(tz, at)
    # In the second pass every wall time of the repeated hour has already fired.
    start = repeat_end if repeat_end is not None else _local_wall(tz, at) + _SECOND
    walls = CronSim(fields, start, reverse=True)
    for _ in range(_MAX_SKIPS):
        candidate = _wall_to_instant(tz, next(walls))
        if candidate <= at:
            return candidate
    return None


def _elapsed_next(fields: str, tz: ZoneInfo, after: int) -> int | None:
    """First instant > `after` whose local reading matches, segment by constant offset."""
    start = after + 1
    for _ in range(_MAX_SEGMENTS):
        offset = _offset(tz, start)
        wall = next(CronSim(fields, _wall(start, offset) - _SECOND))
        candidate = _instant(wall, offset)
        change = _first_change(tz, start, candidate, offset)
        if change is None:
            return candidate
        start = change
    return None


def _elapsed_prev(fields: str, tz: ZoneInfo, at: int) -> int | None:
    """Latest instant <= `at` whose local reading matches, segment by constant offset."""
    end = at
    for _ in range(_MAX_SEGMENTS):
        offset = _offset(tz, end)
        wall = next(CronSim(fields, _wall(end, offset) + _SECOND, reverse=True))
        candidate = _instant(wall, offset)
        change = _last_change(tz, candidate, end, offset)
        if change is None:
            return candidate
        end = change
    return None


#: An explicit DST rule (gap, fold) that differs from an expression's default (see Cron.rule).
DstRule = tuple[DstGap, DstFold]


def _pass_left_out(tz: ZoneInfo, t: int, fold: DstFold) -> tuple[int, int] | None:
    """When `t` lies in the pass of a repeated hour that `fold` leaves out, that pass as
    [start, end) in epoch seconds; None otherwise."""
    local = datetime.fromtimestamp(t, tz)
    own = _offset_of(local)
    other = _offset_of(local.replace(fold=1 - local.fold))
    if other == own or (fold == "first") != bool(local.fold):
        return None
    shift = abs(other - own)
    if local.fold:  # second pass, left out by "first": it began at the change before t
        change = _first_change(tz, t - shift, t, other)
        start = change if change is not None else t
        return start, start + shift
    change = _first_change(tz, t, t + shift, own)  # first pass, left out by "last"
    end = change if change is not None else t + 1
    return end - shift, end


def _chosen_next(fields: str, tz: ZoneInfo, after: int, rule: DstRule) -> int | None:
    """First firing instant > `after` under an explicit rule (see the module docstring)."""
    gap, fold = rule
    start = after + 1
    if gap == "shift":
        # `start` may itself end a gap: does a wall time inside the gap match?
        offset, earlier = _offset(tz, start), _offset(tz, start - 1)
        if earlier < offset:
            inside = next(CronSim(fields, _wall(start, earlier) - _SECOND))
            if inside < _wall(start, offset):
                return start
    for _ in range(_MAX_SEGMENTS):
        offset = _offset(tz, start)
        wall = next(CronSim(fields, _wall(start, offset) - _SECOND))
        candidate = _instant(wall, offset)
        change = _first_change(tz, start, candidate, offset)
        if change is not None:
            # No match in [start, change): `wall` is also the first at or after the change's
            # reading under this offset, i.e. in the gap when the change opens one.
            later = _offset(tz, change)
            if gap == "shift" and offset < later and wall < _wall(change, later):
                return change
            start = change
            continue
        if fold == "both":
            return candidate
        left_out = _pass_left_out(tz, candidate, fold)
        if left_out is None:
            return candidate
        start = left_out[1]
    return None


def _chosen_prev(fields: str, tz: ZoneInfo, at: int, rule: DstRule) -> int | None:
    """Latest firing instant <= `at` under an explicit rule (see the module docstring)."""
    gap, fold = rule
    end = at
    for _ in range(_MAX_SEGMENTS):
        offset = _offset(tz, end)
        wall = next(CronSim(fields, _wall(end, offset) + _SECOND, reverse=True))
        candidate = _instant(wall, offset)
        change = _last_change(tz, candidate, end, offset)
        if change is not None:
            # The segment [change + 1, end] holds no match; a gap ending at change + 1 fires
            # there under `shift` when its walls hold the latest match before the segment.
            earlier = _offset(tz, change)
            if gap == "shift" and earlier < offset and wall >= _wall(change + 1, earlier):
                return change + 1
            end = change
            continue
        if fold == "both":
            return candidate
        left_out = _pass_left_out(tz, candidate, fold)
        if left_out is None:
            return candidate
        end = left_out[0] - 1
    return None


def _to_local(tz: ZoneInfo, t: int | None) -> datetime | None:
    """Epoch second as an aware datetime in `tz`."""
    return None if t is None else datetime.fromtimestamp(t, tz)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _cached(
    step: Callable[..., int | None], fields: str, tz: ZoneInfo, at: int, *rule: DstRule
) -> datetime | None:
    """``step`` (a next or previous firing, under cron's rule or an explicit one), cached; `at`
    is an epoch second."""
    try:
        found = step(fields, tz, at, *rule)
    except (StopIteration, OverflowError):  # nothing within cronsim's 50 years, or year 9999
        return None
    return _to_local(tz, found)


def _epoch_second(moment: datetime, what: str) -> int:
    """Floor an aware datetime to an epoch second."""
    if moment.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {moment!r}")
    return (moment - _EPOCH) // _SECOND


# --------------------------------------------------------------------------- public


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed cron expression (immutable, hashable, cached by text)."""

    text: str
    fields: str
    fixed: bool

    @classmethod
    def parse(cls, text: str) -> Cron:
        """Parse and validate `text`; raise ValueError naming the bad field and the fix."""
        return _parse(text)

    def rule(self, gap: str | None = None, fold: str | None = None) -> DstRule | None:
        """The DST rule a schedule's ``dst_gap`` and ``dst_fold`` choose for this expression,
        or None when they leave cron's rule (``shift``/``first`` for a fixed expression,
        ``skip``/``both`` for the others) in force: unset, or set to what it is anyway.
        Raises ValueError for a value that is no rule."""
        default: DstRule = ("shift", "first") if self.fixed else ("skip", "both")
        chosen: DstRule = (check_dst_gap(gap) or default[0], check_dst_fold(fold) or default[1])
        return None if chosen == default else chosen

    def next_after(
        self, after: datetime, tz: ZoneInfo, rule: DstRule | None = None
    ) -> datetime | None:
        """First firing strictly after `after`, in `tz` (under `rule` when given, see
        :meth:`rule`); None if none within 50 years."""
        # ZoneInfo(key) returns one shared instance per key, so keying by the object is
        # keying by the zone name, and the result keeps the caller's tzinfo.
        second = _epoch_second(after, "after")
        if rule is not None:
            return _cached(_chosen_next, self.fields, tz, second, rule)
        return _cached(_fixed_next if self.fixed else _elapsed_next, self.fields, tz, second)

    def prev_at_or_before(
        self, at: datetime, tz: ZoneInfo, rule: DstRule | None = None
    ) -> datetime | None:
        """Latest firing at or before `at`, in `tz` (under `rule` when given); None if none
        within 50 years."""
        second = _epoch_second(at, "at")
        if rule is not None:
            return _cached(_chosen_prev, self.fields, tz, second, rule)
        return _cached(_fixed_prev if self.fixed else _elapsed_prev, self.fields, tz, second)


@functools.lru_cache(maxsize=4096)
def _parse(raw: str) -> Cron:
    """Cached body of Cron.parse."""
    text = raw.strip()
    parts = _normalize(text)
    _validate(text, parts)
    fixed = not any("*" in part or "/" in part for part in parts[:3])
    return Cron(text=text, fields=" ".join(parts), fixed=fixed)
