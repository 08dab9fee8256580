"""What pages and API answers derive from rsched's data: times in two zones, DST marks, coming
occurrences with their jitter and exclusions, runs grouped from history events, a listed
schedule's health state, the charts of activity and runs, failure streaks, events and dead
letters grouped. Pure: no I/O."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

from rsched import (
    Activity,
    ActivityPoint,
    DeadLetter,
    DepthPoint,
    HealthEvent,
    HistoryEvent,
    Occurrence,
    RunRecord,
    Schedule,
    ScheduleHealth,
)
from rsched._core.activity import LAG_BOUNDS_MS
from rsched._core.humanize import (
    clock,
    concurrency_text,
    dst_text,
    duration,
    limit_text,
    override_text,
    relative,
    status_text,
    trigger_text,
)
from rsched._core.schedule import to_ms
from rsched._core.timezones import canonical_timezone, resolve_timezone
from rsched.web import _charts as charts
from rsched.web._charts import Series

__all__ = (
    "EventGroup",
    "LetterGroup",
    "Moment",
    "Run",
    "Streak",
    "activity_charts",
    "activity_totals",
    "concurrency_text",
    "depth_chart",
    "dst_text",
    "duration",
    "event_groups",
    "excluded_by",
    "failure_streak",
    "health_of",
    "letter_groups",
    "limit_glob",
    "limit_text",
    "logged_runs",
    "moment",
    "next_runs",
    "override_text",
    "run_chart",
    "runs",
    "status_text",
    "trigger_text",
    "valid_zone",
)

#: Events of a run that come before its outcome; everything else of a run is an outcome.
_FIRE_EVENTS = frozenset({"fired", "buffered", "skipped", "misfired", "released"})


def valid_zone(name: str | None) -> str | None:
    """The zone's canonical name when a schedule could name it, else None."""
    if not name:
        return None
    try:
        return canonical_timezone(name)
    except ValueError:
        return None


_TEMPLATE_FIELD = re.compile(r"\{[^{}]*\}")


def limit_glob(key: str) -> str:
    """The glob of the keys a limit's template fills (``customer:{customer_id}`` ->
    ``customer:*``): the Limits page's filter for a schedule's limit."""
    return _TEMPLATE_FIELD.sub("*", key)


@dataclass(frozen=True, slots=True)
class Moment:
    """One instant as a page shows it: in the viewer's zone, in the schedule's own zone (when
    it differs), relative to now, and as ISO 8601 UTC for ``<time datetime>``."""

    viewer: str
    own: str
    relative: str
    iso: str

    def __bool__(self) -> bool:
        return bool(self.iso)


_NO_MOMENT = Moment("-", "", "", "")


def moment(when: datetime | int | str | None, viewer: str, own: str, now_ms: int) -> Moment:
    """``when``: a datetime, epoch ms, or ISO 8601 text (what the SDK's ``as_dict`` gives)."""
    if when is None or when == "":
        return _NO_MOMENT
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when)
        except ValueError:
            return _NO_MOMENT
    ms = to_ms(when) if isinstance(when, datetime) else int(when)
    return Moment(
        viewer=clock(ms, viewer),
        own=clock(ms, own) if own != viewer else "",
        relative=relative(ms, now_ms),
        iso=datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds"),
    )


@dataclass(frozen=True, slots=True)
class NextRun:
    #: The occurrence's time (its jobs' scheduled_at).
    at: Moment
    #: When it fires: ``at`` plus its jitter's ``delay_ms`` (0 without a jitter).
    fires: Moment
    delay_ms: int
    #: The exclusion calendar that keeps it from running, or None.
    excluded_by: str | None
    utc_offset: str
    #: Set when the zone's UTC offset differs from the previous run's (or from now's, for
    #: the first): "UTC+01:00 → UTC+02:00".
    transition: str


def _offset(dt: datetime) -> str:
    off = dt.utcoffset()
    if off is None:
        return "UTC"
    minutes = int(off.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def next_runs(
    occurrences: Sequence[Occurrence], zone: str, viewer: str, now_ms: int
) -> list[NextRun]:
    """The coming occurrences, each marked where the schedule's zone changes its UTC offset
    (read at the occurrence's time: the wall clock its trigger names)."""
    tz = resolve_timezone(zone)
    previous = _offset(datetime.fromtimestamp(now_ms / 1000, tz))
    out: list[NextRun] = []
    for o in occurrences:
        offset = _offset(o.at.astimezone(tz))
        change = f"{previous} → {offset}" if offset != previous else ""
        out.append(
            NextRun(
                at=moment(o.at, viewer, zone, now_ms),
                fires=moment(o.fires_at, viewer, zone, now_ms),
                delay_ms=to_ms(o.fires_at) - to_ms(o.at),
                excluded_by=o.excluded_by,
                utc_offset=offset,
                transition=change,
            )
        )
        previous = offset
    return out


def excluded_by(record: RunRecord) -> str:
    """The calendar a runs-log record of an excluded occurrence names ("" for any other): the
    log keeps it as the record's error text, ``calendar <name>``."""
    if record.reason != "excluded" or not record.error:
        return ""
    return record.error.removeprefix("calendar ").strip()


@dataclass(slots=True)
class Run:
    """One execution of a schedule, gathered from its history events (newest first)."""

    execution_id: str
    status: str = "queued"
    origin: str = ""
    scheduled_ms: int | None = None
    fired_ms: int | None = None
    late_ms: int | None = None
    #: How long after its occurrence's time the schedule's jitter had it fire.
    jitter_ms: int | None = None
    #: The exclusion calendar that kept the occurrence from running ("" for a run).
    excluded_by: str = ""
    attempt: int | None = None
    error: str = ""
    #: How long its last attempt ran (its outcome's ``duration_ms``), None when unknown.
    duration_ms: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        def iso(ms: int | None) -> str | None:
            return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat()

        return {
            "execution_id": self.execution_id,
            "status": self.status,
            "origin": self.origin or None,
            "scheduled_at": iso(self.scheduled_ms),
            "fired_at": iso(self.fired_ms),
            "late_ms": self.late_ms,
            "jitter_ms": self.jitter_ms,
            "excluded_by": self.excluded_by or None,
            "attempt": self.attempt,
            "error": self.error or None,
            "duration_ms": self.duration_ms,
            "events": self.events,
        }


def _ms(value: datetime | None) -> int | None:
    return None if value is None else to_ms(value)


def _whole(value: object) -> int | None:
    """A whole number of an event's ``extra`` (stored by the scheduler; anything else: None)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def runs(events: Iterable[HistoryEvent]) -> list[Run]:
    """Runs newest first; ``status`` is the latest event of each (fired means still queued)."""
    by_id: dict[str, Run] = {}
    for event in events:  # newest first
        name = event.event
        exec_id = event.execution_id or f"({name} at {event.at.isoformat(timespec='seconds')})"
        run = by_id.get(exec_id)
        if run is None:
            run = by_id[exec_id] = Run(exec_id)
            run.status = "queued" if name == "fired" else name
            if name == "skipped" and event.reason:
                run.status = f"skipped ({event.reason})"
        run.events.append(event.as_dict())
        if name in _FIRE_EVENTS:
            run.origin = run.origin or event.origin or name
            run.scheduled_ms = run.scheduled_ms or _ms(event.scheduled_at)
            run.fired_ms = run.fired_ms or to_ms(event.at)
            run.late_ms = run.late_ms if run.late_ms is not None else event.late_ms
            jitter = _whole(event.extra.get("jitter_ms"))
            run.jitter_ms = run.jitter_ms if run.jitter_ms is not None else jitter or None
            if name == "skipped" and event.reason == "excluded" and not run.excluded_by:
                run.excluded_by = str(event.extra.get("calendar") or "")
        if run.attempt is None and event.attempt is not None:
            run.attempt = event.attempt
        if not run.error and event.error:
            run.error = f"{event.error_type or 'error'}: {event.error}"
        if run.duration_ms is None and event.duration_ms is not None:
            run.duration_ms = event.duration_ms
    return list(by_id.values())


def logged_runs(records: Iterable[RunRecord], known: Iterable[str] = ()) -> list[Run]:
    """Runs from the runs log's records (newest first) of one schedule, newest first, as
    :func:`runs` makes them from its history; those whose execution id is in ``known`` (runs
    its history has) left out. A run that was retried has a record per attempt: its newest
    says how it ended and how long its last attempt took."""
    seen = set(known)
    out: list[Run] = []
    for record in records:
        if record.execution_id in seen:
            continue
        seen.add(record.execution_id)
        status = record.status
        if status == "skipped" and record.reason:
            status = f"skipped ({record.reason})"
        took = None
        if record.started_at is not None and record.ended_at is not None:
            took = (record.ended_at - record.started_at).total_seconds() * 1000
        out.append(
            Run(
                record.execution_id,
                status=status,
                scheduled_ms=_ms(record.scheduled_at),
                # A skipped occurrence was never fired: when it was dropped.
                fired_ms=_ms(record.fired_at or record.ended_at),
                excluded_by=excluded_by(record),
                attempt=record.attempt,
                # A skipped or cancelled run's error text is its reason's detail, not an error.
                error=f"{record.error_type or 'error'}: {record.error}"
                if record.error and not record.reason
                else "",
                duration_ms=took,
            )
        )
    return out


def last_outcome(events: Sequence[HistoryEvent]) -> str:
    """The newest run's status, or "" when the schedule never ran."""
    found = runs(events[:12])
    return found[0].status if found else ""


def health_of(schedule: Schedule, unhealthy: Mapping[str, ScheduleHealth]) -> tuple[str, str]:
    """(state, why) of a listed schedule: its entry among ``Client.health()``'s unhealthy
    schedules (late, stuck, failing), else paused, completed or ok from its own fields, so a
    page of schedules costs one health check, not one per row."""
    found = unhealthy.get(schedule.id)
    if found is not None:
        return found.state, found.reason
    if schedule.completed:
        return "completed", ""
    if schedule.paused:
        return "paused", schedule.pause_note or ""
    return "ok", ""


#: The activity counters the overview draws, with each line's CSS class.
ACTIVITY_LINES = ("fired", "completed", "failed", "dead", "skipped")


def _hhmm(start: datetime, viewer: str) -> str:
    return clock(to_ms(start), viewer)[11:16]


def activity_charts(act: Activity, viewer: str) -> dict[str, Markup]:
    """The overview's charts: counts per minute (the last hour), per hour (the last day), and
    the fire lag's p50 and p99 per minute."""

    def lines_of(points: Sequence[ActivityPoint], label: str, every: int, width: int) -> Markup:
        titles = [_hhmm(p.start, viewer) for p in points]
        ticks = [(i, t) for i, t in enumerate(titles) if i % every == 0]
        series = [Series(n, [float(p[n]) for p in points], f"c-{n}") for n in ACTIVITY_LINES]
        return charts.lines(label, series, titles, ticks, width=width)

    def lag(v: float | None) -> float | None:
        return None if v is None else min(v, float(LAG_BOUNDS_MS[-1]))

    minutes = act.minutes
    titles = [_hhmm(p.start, viewer) for p in minutes]
    return {
        "minutes": lines_of(minutes, "activity per minute, the last hour", 10, 1200),
        "hours": lines_of(act.hours, "activity per hour, the last day", 4, 560),
        "lag": charts.lines(
            "fire lag per minute (p50 and p99), the last hour",
            [
                Series("p50", [lag(p.p50_ms) for p in minutes], "c-p50"),
                Series("p99", [lag(p.p99_ms) for p in minutes], "c-p99"),
            ],
            titles,
            [(i, t) for i, t in enumerate(titles) if i % 10 == 0],
            unit="ms",
        ),
    }


def depth_chart(points: Sequence[DepthPoint], viewer: str) -> Markup:
    """A queue's waiting and delayed jobs per minute over the last hour (gaps: no sample)."""
    titles = [_hhmm(p.start, viewer) for p in points]

    def values(name: str) -> list[float | None]:
        return [None if (v := getattr(p, name)) is None else float(v) for p in points]

    return charts.lines(
        "the queue's depth per minute, the last hour",
        [
            Series("waiting", values("waiting"), "c-fired"),
            Series("delayed", values("delayed"), "c-skipped"),
        ],
        titles,
        [(i, t) for i, t in enumerate(titles) if i % 10 == 0],
        width=1200,
    )


def activity_totals(act: Activity) -> dict[str, int]:
    """Each counter summed over the last hour (the charts' legend)."""
    return {name: sum(p[name] for p in act.minutes) for name in ACTIVITY_LINES}


def run_chart(found: Sequence[Run], viewer: str, now_ms: int) -> Markup:
    """A schedule's recent runs, oldest left: a bar each, its height the run's duration, its
    color the outcome (a run without a duration, queued or skipped, shows as a sliver)."""
    shown = [r for r in reversed(found) if not r.execution_id.startswith("(")]
    items = []
    for r in shown:
        when = moment(r.fired_ms, viewer, viewer, now_ms).viewer if r.fired_ms else "-"
        took = duration(r.duration_ms) if r.duration_ms is not None else "no duration"
        status = r.status.split(" ")[0]
        what = f"skipped, excluded by {r.excluded_by}" if r.excluded_by else r.status
        items.append(
            charts.Bar(float(r.duration_ms or 0), f"o-{status}", f"{when}: {what}, {took}")
        )
    return charts.bars(
        "durations and outcomes of the recent runs", items, unit="ms", width=1200, slots=50
    )


#: Outcomes that end a run in failure (a failure streak's runs).
_FAILED = frozenset({"dead", "failed", "timed_out", "expired"})


@dataclass(frozen=True, slots=True)
class Streak:
    """The current run of failures of a schedule, from its kept history."""

    #: When its first run fired (or its first event), epoch ms.
    since_ms: int
    #: How many runs in a row failed.
    runs: int
    #: True when the streak reaches the oldest run kept: it may have started earlier.
    at_least: bool


def failure_streak(found: Sequence[Run]) -> Streak | None:
    """The newest runs that ended in failure, in a row, up to the newest that did not (runs
    still going are passed over); None when the newest finished run did not fail."""
    streak: list[Run] = []
    for r in found:  # newest first
        status = r.status.split(" ")[0]
        if status in ("queued", "started", "running", "retried", "fired", "buffered"):
            if not streak:
                continue
            break
        if status not in _FAILED:
            break
        streak.append(r)
    else:
        if streak:
            return Streak(_start(streak[-1]), len(streak), True)
        return None
    if not streak:
        return None
    return Streak(_start(streak[-1]), len(streak), False)


def _start(r: Run) -> int:
    if r.fired_ms is not None:
        return r.fired_ms
    ats = [e.get("at") for e in r.events]
    times = [to_ms(datetime.fromisoformat(a)) for a in ats if isinstance(a, str)]
    return min(times) if times else 0


@dataclass(frozen=True, slots=True)
class EventGroup:
    """Events alike (same kind, schedule, queue, task and reason) that follow each other in
    the stream, newest first: the newest, how many, and the oldest one's time."""

    newest: HealthEvent
    count: int
    oldest_at: datetime


#: Fields that tell events of one kind apart for grouping (ids of each dead letter do not).
_GROUP_FIELDS = ("queue", "task", "reason", "state", "error_type")


def event_groups(events: Sequence[HealthEvent], kind: str = "") -> list[EventGroup]:
    """The events (newest first) of ``kind`` ('' = every kind), repeats in a row folded into
    one group: a flood of dead letters of one task reads as one line with its count."""
    out: list[EventGroup] = []
    last: tuple[Any, ...] | None = None
    for e in events:
        if kind and e.kind != kind:
            continue
        key = (e.kind, e.schedule_id, *(str(e.fields.get(f, "")) for f in _GROUP_FIELDS))
        if out and key == last:
            g = out[-1]
            out[-1] = EventGroup(g.newest, g.count + 1, e.at)
        else:
            out.append(EventGroup(e, 1, e.at))
        last = key
    return out


@dataclass(frozen=True, slots=True)
class LetterGroup:
    """Dead letters of one task and error type: how many, the newest, and the schedules."""

    task: str
    error_type: str
    count: int
    newest: DeadLetter
    schedules: tuple[str, ...]


def letter_groups(letters: Sequence[DeadLetter]) -> list[LetterGroup]:
    """The dead letters grouped by task and error type, the largest group first."""
    groups: dict[tuple[str, str], list[DeadLetter]] = {}
    for d in letters:
        groups.setdefault((d.task, d.error_type or d.reason), []).append(d)
    out = [
        LetterGroup(
            task,
            error,
            len(found),
            max(found, key=lambda d: d.dead_at),
            tuple(sorted({d.schedule_id for d in found if d.schedule_id})),
        )
        for (task, error), found in groups.items()
    ]
    out.sort(key=lambda g: (-g.count, g.task, g.error_type))
    return out
