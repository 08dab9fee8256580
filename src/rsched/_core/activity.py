"""The activity counters: what happened per minute (the last hour) and per hour (the last day).

The scripts count where things happen, once per call (lua/includes/activity.lua): ``fire``
counts fired and skipped occurrences and the lag of each on-time fire (in log-spaced buckets),
the worker scripts completed, failed (an attempt that failed or timed out and is retried), dead,
expired (counted as skipped: it never ran) and cancelled runs. Each partition's HASH
``{p}:activity`` keeps two rings of slots, 64 minutes and 26 hours; a slot is cleared when a
new minute (hour) first writes into it, so a minute is never rewritten once it is over and the
hash stays bounded. This module reads those hashes (one or one per partition) into
:class:`Activity`: pure, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

#: The counters, in the order pages show them.
COUNTERS = ("fired", "completed", "failed", "dead", "skipped", "cancelled")
#: Upper bounds (ms) of the fire lag buckets; a last bucket holds the later ones
#: (lua/includes/activity_lag.lua holds the same numbers).
LAG_BOUNDS_MS = (10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000)
LAG_BUCKETS = len(LAG_BOUNDS_MS) + 1
#: Slots of each ring (lua/includes/activity.lua): more than the hour (day) shown, so the
#: oldest minute (hour) shown is never the one being cleared for the current.
MINUTE_SLOTS = 64
HOUR_SLOTS = 26
#: What a read returns by default, and at most.
MINUTES = 60
HOURS = 24

_MINUTE_MS = 60_000
_HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class ActivityPoint:
    """The counts of one minute (or hour), summed over the partitions."""

    #: The minute's (hour's) start, UTC.
    start: datetime
    #: Counter name (``COUNTERS``) -> count; every counter is present.
    counts: Mapping[str, int]
    #: Fires per lag bucket (``LAG_BOUNDS_MS``, then one for later fires).
    lags: tuple[int, ...] = field(default=(0,) * LAG_BUCKETS)

    def __getitem__(self, name: str) -> int:
        return self.counts.get(name, 0)

    def lag_ms(self, quantile: float) -> float | None:
        """The fire lag below which ``quantile`` of the on-time fires were (ms), as the upper
        bound of its bucket (``math.inf`` beyond the last); None with no fire counted."""
        total = sum(self.lags)
        if total == 0:
            return None
        want = quantile * total
        seen = 0
        for i, n in enumerate(self.lags):
            seen += n
            if seen >= want and n:
                return float(LAG_BOUNDS_MS[i]) if i < len(LAG_BOUNDS_MS) else math.inf
        return math.inf

    @property
    def p50_ms(self) -> float | None:
        return self.lag_ms(0.5)

    @property
    def p99_ms(self) -> float | None:
        return self.lag_ms(0.99)

    def as_dict(self) -> dict[str, Any]:
        def num(v: float | None) -> float | None:
            return None if v is None or math.isinf(v) else v

        return {
            "start": self.start.isoformat(),
            **{name: self[name] for name in COUNTERS},
            "lag_p50_ms": num(self.p50_ms),
            "lag_p99_ms": num(self.p99_ms),
            "lag_over_max": bool(self.lags[-1]),
            "lags": list(self.lags),
        }


@dataclass(frozen=True, slots=True)
class Activity:
    """Every minute of the last ``minutes`` and every hour of the last ``hours``, oldest first
    (the last one still counting), zeros included."""

    minutes: tuple[ActivityPoint, ...]
    hours: tuple[ActivityPoint, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "minutes": [p.as_dict() for p in self.minutes],
            "hours": [p.as_dict() for p in self.hours],
            "lag_bounds_ms": list(LAG_BOUNDS_MS),
        }


def _slots(raw: Mapping[str, str], ring: str) -> dict[int, dict[str, int]]:
    """Stamp (epoch minute or hour) -> its counters, for one ring ('m' or 'h') of one hash.
    A field that is not a number (written by someone else) is left out."""
    stamps: dict[str, int] = {}
    for name, value in raw.items():
        if name.startswith(ring) and name[1:].isdigit() and value.lstrip("-").isdigit():
            stamps[name] = int(value)
    out: dict[int, dict[str, int]] = {}
    for name, value in raw.items():
        slot, _, counter = name.partition(":")
        if not counter or slot not in stamps:
            continue
        try:
            n = int(value)
        except ValueError:
            continue
        counts = out.setdefault(stamps[slot], {})
        counts[counter] = counts.get(counter, 0) + n
    for stamp in stamps.values():
        out.setdefault(stamp, {})
    return out


def _points(
    hashes: Iterable[Mapping[str, str]], ring: str, last: int, n: int, unit_ms: int
) -> tuple[ActivityPoint, ...]:
    summed: dict[int, dict[str, int]] = {}
    for raw in hashes:
        for stamp, counts in _slots(raw, ring).items():
            into = summed.setdefault(stamp, {})
            for name, value in counts.items():
                into[name] = into.get(name, 0) + value
    points = []
    for stamp in range(last - n + 1, last + 1):
        counts = summed.get(stamp, {})
        lags = tuple(max(0, counts.get(f"lag{i}", 0)) for i in range(LAG_BUCKETS))
        points.append(
            ActivityPoint(
                start=datetime.fromtimestamp(stamp * unit_ms / 1000, UTC),
                counts={name: max(0, counts.get(name, 0)) for name in COUNTERS},
                lags=lags,
            )
        )
    return tuple(points)


def activity_of(
    hashes: Iterable[Mapping[str, str]], now_ms: int, minutes: int = MINUTES, hours: int = HOURS
) -> Activity:
    """The activity of the last ``minutes`` (1..60) and ``hours`` (1..24) ending at ``now_ms``,
    summed over ``hashes`` (each partition's ``{p}:activity``, as HGETALL gives it)."""
    every = list(hashes)
    minute = now_ms // _MINUTE_MS
    return Activity(
        minutes=_points(every, "m", minute, minutes, _MINUTE_MS),
        hours=_points(every, "h", minute // 60, hours, _HOUR_MS),
    )


@dataclass(frozen=True, slots=True)
class DepthPoint:
    """A queue's depth in one minute, as the partitions' leaders sampled it (summed over the
    partitions that sampled it): jobs ``waiting`` in its streams (every level) and
    ``delayed``; None for a minute no leader sampled (no scheduler led then)."""

    start: datetime
    waiting: int | None
    delayed: int | None

    def as_dict(self) -> dict[str, Any]:
        return {"start": self.start.isoformat(), "waiting": self.waiting, "delayed": self.delayed}


def depth_of(
    samples: Iterable[Mapping[int, tuple[int, int]]], now_ms: int, minutes: int = MINUTES
) -> list[DepthPoint]:
    """Each minute of the last ``minutes`` ending at ``now_ms``, oldest first, from each
    partition's samples (epoch minute -> (waiting, delayed))."""
    summed: dict[int, tuple[int, int]] = {}
    for part in samples:
        for minute, (waiting, delayed) in part.items():
            w, d = summed.get(minute, (0, 0))
            summed[minute] = (w + waiting, d + delayed)
    last = now_ms // _MINUTE_MS
    out = []
    for minute in range(last - minutes + 1, last + 1):
        found = summed.get(minute)
        out.append(
            DepthPoint(
                start=datetime.fromtimestamp(minute * 60, UTC),
                waiting=found[0] if found else None,
                delayed=found[1] if found else None,
            )
        )
    return out
