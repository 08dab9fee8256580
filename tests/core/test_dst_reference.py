"""Property tests of the cron DST rules against a reference model, around every UTC-offset change
of every IANA zone from 1970 to 2040 (no Redis).

The reference (``reference`` below) knows nothing of the engine: it lists each local day's wall
times that a cron spec names, maps each one to instants with zoneinfo (``fold=0`` and ``fold=1``)
and applies the rule:

* a wall time both folds map to the same instant exists once: that instant;
* one whose ``fold=0`` instant comes first exists twice (a fall-back fold): ``first``, ``last``
  or ``both`` of the two;
* one whose ``fold=0`` instant comes last does not exist (a spring-forward gap): ``skip`` drops
  it, ``shift`` runs it at the first instant whose clock reads it or later (found by bisection).

Unset, the rule is cron's: ``shift``/``first`` for a spec with no ``*`` or step in its second,
minute and hour fields, ``skip``/``both`` for the others. The engine (``Cron.next_after`` and
``Cron.prev_at_or_before``, walked over a window) must give exactly the reference's instants, for
each of the six explicit rules (the path a schedule that chose one takes) and unset (cron's own
path).

Where: every change found by probing each zone every 6 days (shorter than the shortest offset
period since 1970, Brazil's one-week summer time of October 2000) and bisecting to the second.
Zones that share a change (links, neighbours) are checked once per distinct (instant, offset
before, offset after).
"""

from __future__ import annotations

import functools
import itertools
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, available_timezones

import pytest

from rsched._core.cron import Cron, DstRule
from rsched._core.rules import DST_FOLDS, DST_GAPS

_START = int(datetime(1970, 1, 1, tzinfo=UTC).timestamp())
_END = int(datetime(2040, 1, 1, tzinfo=UTC).timestamp())
_PROBE_S = 6 * 86_400
_HOUR = 3600
#: Unset (cron's rule), then the six explicit rules.
RULES: list[DstRule | None] = [None, *itertools.product(DST_GAPS, DST_FOLDS)]
#: The specs checked around every kind of change, besides two placed on the change itself.
SPECS = ("30 2 * * *", "0 * * * *", "*/15 1-3 * * *")

Change = tuple[int, int, int]  # (epoch second of the change, offset before, offset after)


# --------------------------------------------------------------------------- the zones' changes


def _offset(tz: ZoneInfo, t: int) -> int:
    offset = datetime.fromtimestamp(t, tz).utcoffset()
    assert offset is not None
    return int(offset.total_seconds())


def _changes(tz: ZoneInfo) -> list[Change]:
    found: list[Change] = []
    t, offset = _START, _offset(tz, _START)
    while t < _END:
        probe = min(t + _PROBE_S, _END)
        if _offset(tz, probe) == offset:
            t = probe
            continue
        lo, hi = t, probe
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if _offset(tz, mid) == offset else (lo, mid)
        after = _offset(tz, hi)
        found.append((hi, offset, after))
        t, offset = hi, after
    return found


@functools.cache
def all_changes() -> dict[Change, str]:
    """Every distinct offset change of 1970-2040, with the first zone (by name) that has it."""
    seen: dict[Change, str] = {}
    for name in sorted(available_timezones()):
        for change in _changes(ZoneInfo(name)):
            seen.setdefault(change, name)
    return seen


# --------------------------------------------------------------------------- the reference


def _values(field: str, lo: int, hi: int) -> list[int]:
    """A cron field of numbers, ranges, lists and steps (no names, no L or #)."""
    out: set[int] = set()
    for part in field.split(","):
        base, _, step = part.partition("/")
        if base == "*":
            first, last = lo, hi
        elif "-" in base:
            first, last = (int(n) for n in base.split("-"))
        else:
            first = last = int(base)
        out.update(range(first, last + 1, int(step or 1)))
    return sorted(out)


def _daily_walls(spec: str) -> tuple[list[time], bool]:
    """The wall times a daily spec names each day, and whether it is a fixed-time spec."""
    fields = spec.split()
    if len(fields) == 5:
        fields.insert(0, "0")
    assert fields[3:] == ["*", "*", "*"], "the reference knows daily specs only"
    seconds, minutes, hours = (
        _values(f, 0, hi) for f, hi in zip(fields[:3], (59, 59, 23), strict=True)
    )
    walls = [time(h, m, s) for h in hours for m in minutes for s in seconds]
    fixed = not any(c in f for f in fields[:3] for c in "*/")
    return walls, fixed


def _reading(t: int, tz: ZoneInfo) -> datetime:
    """What the zone's clock reads at epoch second t."""
    return datetime.fromtimestamp(t, tz).replace(tzinfo=None)


def _instants(wall: datetime, tz: ZoneInfo) -> tuple[int, int, int]:
    """The instants zoneinfo maps ``wall`` to with fold=0 and fold=1, and (for a wall time in
    a gap) the first instant at which the clock reads ``wall`` or later."""
    early = int(wall.replace(tzinfo=tz, fold=0).timestamp())
    late = int(wall.replace(tzinfo=tz, fold=1).timestamp())
    if early <= late:
        return early, late, early
    lo, hi = late, early  # the clock reads less than `wall` at lo, at least `wall` at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _reading(mid, tz) >= wall else (mid, hi)
    return early, late, hi


@functools.lru_cache(maxsize=64)
def _mapped(spec: str, tz: ZoneInfo, lo: int, hi: int) -> tuple[list[tuple[int, int, int]], bool]:
    """What :func:`_instants` says of each wall time ``spec`` names on the days around [lo, hi]
    (shared by the rules), and whether it is a fixed-time spec."""
    walls, fixed = _daily_walls(spec)
    mapped = []
    day: date = _reading(lo, tz).date() - timedelta(days=2)
    while day <= _reading(hi, tz).date() + timedelta(days=2):
        mapped += [_instants(datetime.combine(day, wall), tz) for wall in walls]
        day += timedelta(days=1)
    return mapped, fixed


def reference(spec: str, tz: ZoneInfo, lo: int, hi: int, rule: DstRule | None) -> list[int]:
    """The instants in [lo, hi] at which ``spec`` fires in ``tz`` under ``rule``."""
    mapped, fixed = _mapped(spec, tz, lo, hi)
    gap, fold = rule or (("shift", "first") if fixed else ("skip", "both"))
    out: set[int] = set()
    for early, late, gap_end in mapped:
        if early == late:  # exists once
            out.add(early)
        elif early < late:  # exists twice: a fold
            out.update({"first": [early], "last": [late], "both": [early, late]}[fold])
        elif gap == "shift":  # does not exist: a gap
            out.add(gap_end)
    return sorted(t for t in out if lo <= t <= hi)


# --------------------------------------------------------------------------- the engine


def forward(spec: str, tz: ZoneInfo, lo: int, hi: int, rule: DstRule | None) -> list[int]:
    cron, out = Cron.parse(spec), []
    found = cron.next_after(datetime.fromtimestamp(lo - 1, UTC), tz, rule)
    while found is not None and found.timestamp() <= hi:
        out.append(int(found.timestamp()))
        found = cron.next_after(found, tz, rule)
    return out


def backward(spec: str, tz: ZoneInfo, lo: int, hi: int, rule: DstRule | None) -> list[int]:
    cron, out = Cron.parse(spec), []
    found = cron.prev_at_or_before(datetime.fromtimestamp(hi, UTC), tz, rule)
    while found is not None and found.timestamp() >= lo:
        out.append(int(found.timestamp()))
        found = cron.prev_at_or_before(datetime.fromtimestamp(out[-1] - 1, UTC), tz, rule)
    return out[::-1]


def on_the_change(change: Change) -> list[str]:
    """Two specs aimed at the wall times a change skips or repeats: a fixed time in their
    middle, and every 20 minutes of that hour."""
    t, before, after = change
    middle = (t + min(before, after) + abs(after - before) // 2) % 86_400 // 60
    hour, minute = divmod(middle, 60)
    return [f"{minute} {hour} * * *", f"*/20 {hour} * * *"]


def _shown(instants: list[int], tz: ZoneInfo) -> list[str]:
    return [datetime.fromtimestamp(t, tz).isoformat() for t in instants]


def from_anywhere(
    spec: str, tz: ZoneInfo, lo: int, hi: int, rule: DstRule | None, points: list[int]
) -> list[tuple[int | None, int | None]]:
    """For each point, the engine's next occurrence after it and latest at or before it (None
    outside [lo, hi]): queries that start between occurrences, e.g. at a gap's last second."""
    cron, out = Cron.parse(spec), []
    for point in points:
        at = datetime.fromtimestamp(point, UTC)
        following = cron.next_after(at, tz, rule)
        previous = cron.prev_at_or_before(at, tz, rule)
        out.append(
            (
                int(following.timestamp()) if following and following.timestamp() <= hi else None,
                int(previous.timestamp()) if previous and previous.timestamp() >= lo else None,
            )
        )
    return out


def _check(
    zone: str, change: Change, specs: list[str], span_s: int, both_ways: bool, bad: list[str]
) -> int:
    tz, (t, before, after) = ZoneInfo(zone), change
    lo, hi = t - span_s, t + span_s
    shift = abs(after - before)
    # The change and the ends of the wall times it skips or repeats, and a second either side.
    points = sorted(
        {p + d for p in (t - shift, t, t + shift) for d in (-1, 0, 1) if lo <= p + d < hi}
    )
    runs = 0
    for spec, rule in itertools.product(specs, RULES):
        want = reference(spec, tz, lo, hi, rule)
        got = [forward(spec, tz, lo, hi, rule)]
        if both_ways:
            got.append(backward(spec, tz, lo, hi, rule))
        runs += 1
        if any(g != want for g in got) and len(bad) < 10:
            bad.append(
                f"{zone} {_reading(t - 1, tz)} ({before} -> {after} s) {spec!r} {rule}: "
                f"want {_shown(want, tz)}, got {[_shown(g, tz) for g in got]}"
            )
        if not both_ways:
            continue
        expected = [
            (
                min((w for w in want if w > p), default=None),
                max((w for w in want if w <= p), default=None),
            )
            for p in points
        ]
        found = from_anywhere(spec, tz, lo, hi, rule, points)
        if found != expected and len(bad) < 10:
            bad.append(
                f"{zone} {_reading(t - 1, tz)} ({before} -> {after} s) {spec!r} {rule} from "
                f"{points}: want {expected}, got {found}"
            )
    return runs


# CPU-bound and deterministic (~80 s alone): beside the suite's other processes on two cores it
# can take twice that, past the suite's 120 s timeout.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_change_of_every_zone() -> None:
    # Each distinct change with the two specs aimed at it, forward, in the 6 hours around it.
    changes = all_changes()
    assert len(changes) > 5_000  # tzdata has ~6,000 since 1970
    bad: list[str] = []
    runs = sum(
        _check(zone, change, on_the_change(change), 3 * _HOUR, False, bad)
        for change, zone in changes.items()
    )
    assert not bad, "\n".join(bad)
    assert runs == len(changes) * 2 * len(RULES)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_kind_of_change_both_ways() -> None:
    # One change per kind (offsets before and after, the wall time it happens at): the specs
    # of SPECS and the two aimed at it, forward and backward, in the 12 hours around it, and
    # from the seconds around the change and the ends of the wall times it moves.
    kinds: dict[tuple[int, int, int], tuple[Change, str]] = {}
    for change, zone in all_changes().items():
        t, before, after = change
        kinds.setdefault((before, after, (t + before) % 86_400), (change, zone))
    assert len(kinds) > 200
    bad: list[str] = []
    for change, zone in kinds.values():
        _check(zone, change, [*SPECS, *on_the_change(change)], 6 * _HOUR, True, bad)
    assert not bad, "\n".join(bad)


def test_the_reference_on_known_days() -> None:
    # The reference itself, on the days README's examples name.
    ny = ZoneInfo("America/New_York")
    spring = int(datetime(2026, 3, 8, 7, tzinfo=UTC).timestamp())  # 02:00 EST -> 03:00 EDT
    window = (spring - 6 * _HOUR, spring + 6 * _HOUR)
    assert _shown(reference("30 2 * * *", ny, *window, None), ny) == ["2026-03-08T03:00:00-04:00"]
    assert reference("30 2 * * *", ny, *window, ("skip", "first")) == []
    autumn = int(datetime(2026, 11, 1, 6, tzinfo=UTC).timestamp())  # 02:00 EDT -> 01:00 EST
    window = (autumn - 6 * _HOUR, autumn + 6 * _HOUR)
    assert _shown(reference("30 1 * * *", ny, *window, ("shift", "both")), ny) == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:30:00-05:00",
    ]
    assert len(reference("*/15 * * * *", ny, *window, None)) == 12 * 4 + 1
