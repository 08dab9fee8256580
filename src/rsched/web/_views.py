"""What pages and API answers derive from rsched's data: times in two zones, DST marks, coming
occurrences with their jitter and exclusions, runs grouped from history events, a listed
schedule's health state, per-minute activity. Pure: no I/O."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rsched import HistoryEvent, Occurrence, RunRecord, Schedule, ScheduleHealth
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

__all__ = (
    "Moment",
    "Run",
    "activity",
    "concurrency_text",
    "dst_text",
    "duration",
    "excluded_by",
    "health_of",
    "limit_glob",
    "limit_text",
    "moment",
    "next_runs",
    "override_text",
    "runs",
    "status_text",
    "trigger_text",
    "valid_zone",
)

#: Events of a run that come before its outcome; everything else of a run is an outcome.
_FIRE_EVENTS = frozenset({"fired", "buffered", "skipped", "misfired", "released"})
#: Columns of the activity table, in order.
ACTIVITY_EVENTS = ("fired", "completed", "failed", "dead", "skipped")


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
    return list(by_id.values())


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


def activity(
    histories: Iterable[Sequence[HistoryEvent]], now_ms: int, minutes: int = 10
) -> list[tuple[int, Counter[str]]]:
    """Per minute of the last ``minutes`` (newest first): counts of fired, completed, failed
    (incl. timed out), dead and skipped events in the given histories."""
    start = (now_ms // 60_000 - minutes + 1) * 60_000
    buckets: list[Counter[str]] = [Counter() for _ in range(minutes)]
    for events in histories:
        for event in events:
            at = to_ms(event.at)
            if at < start or at > now_ms:
                continue
            name = event.event
            name = "failed" if name == "timed_out" else name
            if name in ACTIVITY_EVENTS:
                buckets[(at - start) // 60_000][name] += 1
    return [(start + i * 60_000, buckets[i]) for i in reversed(range(minutes))]
