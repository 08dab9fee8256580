"""When a schedule fires: occurrences of its trigger inside its window, as epoch milliseconds.

Pure arithmetic shared by the scheduler, the SDK preview and the CLI. Cron DST rules live in
``cron`` (cron's own, or the one a schedule's ``dst_gap`` / ``dst_fold`` choose); ``every``
intervals are elapsed time (they ignore DST) anchored at ``start_at``, or one interval after
creation; ``at`` is a single occurrence.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple
from zoneinfo import ZoneInfo

from rsched._core.calendars import Calendar, excluding
from rsched._core.cron import Cron, DstRule
from rsched._core.errors import InvalidSchedule
from rsched._core.schedule import Schedule, from_ms, to_ms
from rsched._core.timezones import resolve_timezone
from rsched._core.words import words


# The schedules of a herd share their expression, zone and due time: the next run is computed
# once (Cron caches by second; this also skips the datetime conversions around it). A schedule
# on cron's DST rule calls it without `rule`, under the same key as before rules existed.
@functools.lru_cache(maxsize=16_384)
def _cron_next_ms(
    cron: Cron, tz: ZoneInfo, after_ms: int, rule: DstRule | None = None
) -> int | None:
    nxt = cron.next_after(from_ms(after_ms, UTC), tz, rule)
    return to_ms(nxt) if nxt else None


#: The hash fields a stored cron schedule's timing is built from.
_CRON_TIMING_FIELDS = ("timezone", "cron", "start_at", "end_at", "dst_gap", "dst_fold", "jitter")


@functools.lru_cache(maxsize=4_096)
def _cron_timing(*values: str | None) -> Timing:
    """The timing of a stored cron schedule (the values of _CRON_TIMING_FIELDS): one instance
    for all that share their expression, zone and window (an interval's depends on its creation
    too). The scheduler's spec cache holds one timing per schedule: a million crons in a dozen
    zones share a few thousand."""
    fields = {k: v for k, v in zip(_CRON_TIMING_FIELDS, values, strict=True) if v is not None}
    return Timing._from_hash_fields(fields)


@dataclass(frozen=True, slots=True)
class Timing:
    """The time part of a schedule, compiled. All times are epoch ms."""

    tz: ZoneInfo
    cron: Cron | None = None
    every_ms: int | None = None
    at_ms: int | None = None
    start_ms: int | None = None
    end_ms: int | None = None
    anchor_ms: int | None = None  # first occurrence of an `every` schedule, when known
    rule: DstRule | None = None  # a cron schedule's chosen DST rule; None: cron's own
    jitter_ms: int | None = None  # the schedule's jitter; None: occurrences fire on time

    @classmethod
    def of(cls, schedule: Schedule) -> Timing:
        created = to_ms(schedule.created_at) if schedule.created_at else None
        return cls._build(
            tz=resolve_timezone(schedule.timezone),
            cron=schedule.cron,
            every_ms=round(schedule.every * 1000) if schedule.every is not None else None,
            at_ms=to_ms(schedule.at) if schedule.at else None,
            start_ms=to_ms(schedule.start_at) if schedule.start_at else None,
            end_ms=to_ms(schedule.end_at) if schedule.end_at else None,
            created_ms=created,
            dst_gap=schedule.dst_gap,
            dst_fold=schedule.dst_fold,
            jitter_ms=None if schedule.jitter is None else round(schedule.jitter * 1000),
        )

    @classmethod
    def from_hash(cls, fields: dict[str, str]) -> Timing:
        """Build straight from a stored hash (the scheduler's hot path: no model validation);
        a cron schedule's is shared with those of the same timing fields."""
        if "every" in fields or "at" in fields:
            return cls._from_hash_fields(fields)
        return _cron_timing(*map(fields.get, _CRON_TIMING_FIELDS))

    @classmethod
    def _from_hash_fields(cls, fields: dict[str, str]) -> Timing:
        """:meth:`from_hash`, always a new instance."""
        every, jitter = fields.get("every"), fields.get("jitter")
        return cls._build(
            tz=resolve_timezone(fields.get("timezone", "UTC")),
            cron=fields.get("cron"),
            every_ms=round(float(every) * 1000) if every is not None else None,
            at_ms=_int(fields.get("at")),
            start_ms=_int(fields.get("start_at")),
            end_ms=_int(fields.get("end_at")),
            created_ms=_int(fields.get("created_at")),
            dst_gap=fields.get("dst_gap"),
            dst_fold=fields.get("dst_fold"),
            jitter_ms=None if jitter is None else max(1, round(float(jitter) * 1000)),
        )

    @classmethod
    def _build(
        cls,
        *,
        tz: ZoneInfo,
        cron: str | None,
        every_ms: int | None,
        at_ms: int | None,
        start_ms: int | None,
        end_ms: int | None,
        created_ms: int | None,
        dst_gap: str | None = None,
        dst_fold: str | None = None,
        jitter_ms: int | None = None,
    ) -> Timing:
        anchor = None
        if every_ms is not None:
            every_ms = max(every_ms, 1)
            if start_ms is not None:
                anchor = start_ms
            elif created_ms is not None:
                anchor = created_ms + every_ms
        parsed = Cron.parse(cron) if cron is not None else None
        return cls(
            tz=tz,
            cron=parsed,
            every_ms=every_ms,
            at_ms=at_ms,
            start_ms=start_ms,
            end_ms=end_ms,
            anchor_ms=anchor,
            rule=parsed.rule(dst_gap, dst_fold) if parsed and (dst_gap or dst_fold) else None,
            jitter_ms=jitter_ms,
        )

    def _in_window(self, ms: int | None) -> int | None:
        if ms is None or (self.end_ms is not None and ms > self.end_ms):
            return None
        return ms

    def next_after(self, after_ms: int) -> int | None:
        """The first occurrence strictly after ``after_ms``, or None when there is none."""
        if self.start_ms is not None and after_ms < self.start_ms:
            after_ms = self.start_ms - 1
        if self.cron is not None:
            if self.rule is None:
                return self._in_window(_cron_next_ms(self.cron, self.tz, after_ms))
            return self._in_window(_cron_next_ms(self.cron, self.tz, after_ms, self.rule))
        if self.every_ms is not None:
            anchor = self.anchor_ms if self.anchor_ms is not None else after_ms + self.every_ms
            if after_ms < anchor:
                return self._in_window(anchor)
            steps = (after_ms - anchor) // self.every_ms + 1
            return self._in_window(anchor + steps * self.every_ms)
        assert self.at_ms is not None
        return self._in_window(self.at_ms if self.at_ms > after_ms else None)

    def prev_at_or_before(self, ms: int) -> int | None:
        """The latest occurrence at or before ``ms`` (inside the window), or None."""
        if self.end_ms is not None:
            ms = min(ms, self.end_ms)
        found: int | None
        if self.cron is not None:
            prev = self.cron.prev_at_or_before(from_ms(ms, UTC), self.tz, self.rule)
            found = to_ms(prev) if prev else None
        elif self.every_ms is not None:
            anchor = self.anchor_ms if self.anchor_ms is not None else ms
            found = None if ms < anchor else anchor + (ms - anchor) // self.every_ms * self.every_ms
        else:
            assert self.at_ms is not None
            found = self.at_ms if self.at_ms <= ms else None
        if found is None or (self.start_ms is not None and found < self.start_ms):
            return None
        return found

    def delay(self, schedule_id: str, ms: int) -> int:
        """How long after occurrence ``ms`` it fires (0 without a jitter): a delay in
        [0, jitter) from a hash of its execution id, so that every scheduler, retry and preview
        agrees, cut short of the next occurrence (mod the gap instead), so occurrences keep
        their order and never fire twice in one gap."""
        span = self.jitter_ms
        if not span:
            return 0
        digest = hashlib.blake2b(f"{schedule_id}@{ms}".encode(), digest_size=8).digest()
        nxt = self.next_after(ms)
        if nxt is not None and nxt - ms < span:
            span = nxt - ms
        return int.from_bytes(digest, "big") % span

    def planned(self, schedule_id: str, ms: int | None) -> int | None:
        """When occurrence ``ms`` fires: its time plus its :meth:`delay` (None stays None)."""
        if ms is None or not self.jitter_ms:
            return ms
        return ms + self.delay(schedule_id, ms)

    def nominal(self, schedule_id: str, planned_ms: int) -> int:
        """The occurrence that fires at ``planned_ms`` (an index score): the latest occurrence
        at or before it, since a delay never reaches the next one; ``planned_ms`` itself when
        that does not hold (a score written by hand, or before the jitter was set)."""
        if not self.jitter_ms:
            return planned_ms
        found = self.prev_at_or_before(planned_ms)
        if found is None or self.planned(schedule_id, found) != planned_ms:
            return planned_ms
        return found

    def between(self, first_ms: int, last_ms: int, limit: int) -> list[int]:
        """Occurrences in [first_ms, last_ms], oldest first, at most ``limit`` of them."""
        out: list[int] = []
        t = self.next_after(first_ms - 1)
        while t is not None and t <= last_ms and len(out) < limit:
            out.append(t)
            t = self.next_after(t)
        return out

    def backfill_between(self, first_ms: int, last_ms: int, limit: int) -> list[int]:
        """The occurrences a backfill of [first_ms, last_ms] runs, oldest first, at most
        ``limit``: :meth:`between`, except that an ``every`` schedule's interval grid extends
        back before its anchor (its ``start_at``, or one interval after its creation) to
        ``anchor - k * every``, so that its past can be filled in too. ``end_at`` still bounds
        it; a cron or one-off schedule has no occurrence before its ``start_at``."""
        if self.every_ms is None or self.anchor_ms is None:
            return self.between(first_ms, last_ms, limit)
        every, anchor = self.every_ms, self.anchor_ms
        if self.end_ms is not None:
            last_ms = min(last_ms, self.end_ms)
        t = anchor - (anchor - first_ms) // every * every  # the first grid point >= first_ms
        out: list[int] = []
        while t <= last_ms and len(out) < limit:
            out.append(t)
            t += every
        return out

    def count(self, first_ms: int, last_ms: int, cap: int) -> int:
        """How many occurrences fall in [first_ms, last_ms], counting no further than ``cap``."""
        if self.every_ms is not None and self.anchor_ms is not None:
            lo = self.next_after(first_ms - 1)
            hi = self.prev_at_or_before(last_ms)
            if lo is None or hi is None or hi < lo:
                return 0
            return min(cap, (hi - lo) // self.every_ms + 1)
        return len(self.between(first_ms, last_ms, cap))


def _int(raw: str | None) -> int | None:
    return int(raw) if raw is not None else None


#: How many occurrences a preview looks at, at most: calendars that exclude every occurrence
#: (or a per-second cron behind a month-long range) would otherwise keep it looking for ever.
PREVIEW_SCAN_MAX = 5_000


class Upcoming(NamedTuple):
    """One coming occurrence of a schedule (see :func:`upcoming`); times in epoch ms."""

    at: int  # the occurrence's time: its jobs' scheduled_at
    fires_at: int  # when it fires: ``at`` plus the jitter's delay
    excluded_by: str | None = None  # the calendar that excludes it: it does not run


def upcoming(
    schedule: Schedule,
    after_ms: int,
    n: int,
    calendars: Sequence[Calendar] = (),
    *,
    with_excluded: bool = False,
) -> list[Upcoming]:
    """The next ``n`` occurrences of ``schedule`` that fire strictly after ``after_ms``.

    Those an exclusion calendar of ``calendars`` (the ones its ``exclude`` names) excludes are
    left out, or with ``with_excluded`` listed with the calendar's name (they count toward
    ``n`` but not as runs of ``max_runs``). An occurrence already past but still waiting out its
    jitter is the first when the schedule's stored ``next_run`` says so. No more than
    PREVIEW_SCAN_MAX occurrences are looked at: fewer than ``n`` come back when calendars
    exclude every one of them.
    """
    if schedule.completed:
        return []
    runs_left = None if schedule.max_runs is None else max(0, schedule.max_runs - schedule.runs)
    timing = Timing.of(schedule)
    sid, tz = schedule.id, timing.tz
    at: int | None = timing.next_after(after_ms)
    if timing.jitter_ms and schedule.next_run is not None:
        stored = to_ms(schedule.next_run)
        if stored > after_ms and timing.nominal(sid, stored) <= after_ms:
            at = timing.nominal(sid, stored)
    out: list[Upcoming] = []
    looked = 0
    while at is not None and len(out) < n and runs_left != 0 and looked < PREVIEW_SCAN_MAX:
        looked += 1
        calendar = excluding(calendars, at, tz) if calendars else None
        if calendar is None or with_excluded:
            out.append(Upcoming(at, at + timing.delay(sid, at), calendar))
        if calendar is None and runs_left is not None:
            runs_left -= 1
        at = timing.next_after(at)
    return out


def next_fire_times(
    schedule: Schedule,
    after: datetime | None = None,
    n: int = 5,
    calendars: Sequence[Calendar] = (),
) -> list[datetime]:
    """The next ``n`` fire times of ``schedule`` strictly after ``after`` (default: now).

    Pure: uses no Redis. Honours the trigger, ``timezone`` (with cron's DST rules, or those
    ``dst_gap`` / ``dst_fold`` choose), ``start_at``/``end_at``, the runs left under
    ``max_runs``, the ``jitter`` (each time is when the occurrence fires, its delay included)
    and, given the exclusion ``calendars`` its ``exclude`` names, leaves out the occurrences they
    exclude; a completed schedule has none. Times are returned in the schedule's time zone.
    """
    tz = resolve_timezone(schedule.timezone)
    now = to_ms(after if after is not None else datetime.now(UTC))
    return [from_ms(u.fires_at, tz) for u in upcoming(schedule, now, n, calendars)]


def first_run_ms(
    schedule: Schedule,
    now_ms: int,
    *,
    created_ms: int | None = None,
    creating: bool = True,
    schedule_id: str | None = None,
) -> int | None:
    """When a schedule being written first fires: its first occurrence strictly after ``now_ms``
    (Redis time), plus its jitter's delay for that occurrence (of ``schedule_id``, default
    ``schedule.id``: a bulk write validates one schedule per shape).

    ``created_ms`` anchors an ``every`` interval without ``start_at`` (default ``now_ms``: a new
    schedule first runs one interval after it is created; pass the stored ``created_at`` when
    replacing one). Returns None only when nothing is left to run for a schedule that already
    exists (``creating=False``: its ``max_runs`` are used up or its window has passed); the
    schedule is then stored as completed.

    Raises InvalidSchedule, naming the field, when ``creating`` a schedule with an ``at`` in
    the past, an ``end_at`` in the past, or a window that holds no occurrence.
    """
    if schedule.max_runs is not None and schedule.runs >= schedule.max_runs and not creating:
        return None
    anchor = created_ms if created_ms is not None else now_ms
    timing = Timing.of(schedule.model_copy(update={"created_at": from_ms(anchor)}))
    nxt = timing.next_after(now_ms)
    if nxt is not None:
        return timing.planned(schedule_id or schedule.id, nxt)
    if not creating:
        return None
    now = from_ms(now_ms).isoformat(timespec="seconds")
    if schedule.at is not None:
        field, message = (
            "at",
            (
                f"{schedule.at.isoformat()} is in the past (it is now {now}); give a future time, "
                f"or {words().run_now}"
            ),
        )
    elif schedule.end_at is not None and to_ms(schedule.end_at) <= now_ms:
        field, message = (
            "end_at",
            (
                f"{schedule.end_at.isoformat()} is in the past (it is now {now}), so the schedule "
                f"would never fire; give a later {words().field('end_at')} or none"
            ),
        )
    else:
        field, message = (
            "end_at",
            (
                f"no occurrence falls between {words().field('start_at')} and "
                f"{words().field('end_at')}, so the schedule would never fire; widen the window"
            ),
        )
    raise InvalidSchedule(schedule.id, [(field, message)])
