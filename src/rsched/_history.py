"""A schedule's history as typed records, and its pages.

The scripts push one JSON object per event on the schedule's history list, newest first (see
docs/keys.md): ``event`` and ``at`` always, the other fields by kind. :class:`HistoryEvent`
reads each with datetimes instead of epoch ms, and keeps every field it does not know in
``extra``, so events written by a newer rsched still read.

A page's cursor is ``<at ms>-<n>``: continue after the n-th event recorded at that
millisecond. Events are pushed in Redis time order, so a cursor keeps its place while new
events arrive at the top and old ones are trimmed at the bottom (an event recorded in the very
millisecond of the cursor's may be seen twice, as with any cursor over a changing list).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from rsched._page import Page

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CURSOR = re.compile(r"^(-?\d{1,16})-(\d{1,9})$")
_TEXT_FIELDS = ("execution_id", "origin", "status", "reason", "error_type", "error")
_INT_FIELDS = ("late_ms", "attempt")


def _datetime(ms: int) -> datetime:
    """Exact (no float rounding): epoch ms -> aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=ms)


def _whole(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One event of a schedule's history (see :meth:`rsched.Client.history`).

    ``event`` names what happened: ``fired``, ``skipped``, ``buffered``, ``misfired``,
    ``released``, ``cancel_requested`` (the scheduler), ``running``, ``completed``,
    ``failed``, ``timed_out``, ``retry``, ``dead``, ``cancelled`` (workers), or a name a newer
    rsched records. ``at`` is when it was recorded (Redis time); ``scheduled_at`` the
    occurrence's time and ``late_ms`` how late it fired; ``origin`` (schedule, trigger,
    backfill, misfire, ...) how it came to run; ``reason`` why it was skipped or dead-lettered.
    Every other field of the stored event is in ``extra`` as it was stored. Datetimes are aware
    UTC. Since 0.1.0.
    """

    event: str
    at: datetime
    execution_id: str | None = None
    scheduled_at: datetime | None = None
    late_ms: int | None = None
    origin: str | None = None
    status: str | None = None
    reason: str | None = None
    attempt: int | None = None
    error_type: str | None = None
    error: str | None = None
    duration_ms: float | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    def as_dict(self) -> dict[str, Any]:
        """The event as JSON-ready data: its fields (datetimes in ISO 8601, absent ones left
        out) with ``extra``'s merged in, as stored."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == "extra" or value is None:
                continue
            out[name] = value.isoformat() if isinstance(value, datetime) else value
        return {**out, **self.extra}


def _head(data: object) -> tuple[int, str, dict[str, Any]] | None:
    """(``at`` in ms, ``event``, the event) of one stored event (decoded JSON), or None when it
    is not an event (not an object, no ``event`` name or ``at`` time: someone else wrote it)."""
    if not isinstance(data, dict):
        return None
    name, at = data.get("event"), _whole(data.get("at"))
    if not isinstance(name, str) or at is None:
        return None
    return at, name, data


def _record(at: int, name: str, data: Mapping[str, Any]) -> HistoryEvent:
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("event", "at"):
            continue
        if key in _TEXT_FIELDS and isinstance(value, str):
            known[key] = value
        elif key in _INT_FIELDS and _whole(value) is not None:
            known[key] = _whole(value)
        elif key == "scheduled_at" and _whole(value) is not None:
            known[key] = _datetime(_whole(value) or 0)
        elif key == "duration_ms" and (_whole(value) is not None or isinstance(value, float)):
            known[key] = float(value)
        else:  # a field this version does not know, or one of an unexpected type
            extra[key] = value
    return HistoryEvent(event=name, at=_datetime(at), extra=extra, **known)


def parse_event(data: object) -> tuple[int, HistoryEvent] | None:
    """(its ``at`` in ms, the event) of one stored event (decoded JSON), or None when it is not
    an event (see :func:`_head`)."""
    head = _head(data)
    return None if head is None else (head[0], _record(*head))


def _decode_cursor(cursor: str) -> tuple[int, int]:
    match = _CURSOR.match(cursor)
    if match is None:
        raise ValueError(f"{cursor!r} is not a cursor; pass the cursor a previous page returned")
    return int(match[1]), int(match[2])


def page_events(
    stored: Iterable[object],
    *,
    limit: int,
    cursor: str | None = None,
    status: str | None = None,
) -> Page[HistoryEvent]:
    """One page of events (newest first) of a schedule's stored history, read whole.

    ``status`` keeps events of that name (or ``status`` field). The cursor is None exactly when
    no further event matches. Raises ValueError for a cursor that is not one.
    """
    after = _decode_cursor(cursor) if cursor else None
    out: list[HistoryEvent] = []
    place = (0, 0)  # (at, n) of the last event taken
    last_at, same = None, 0
    for data in stored:
        head = _head(data)
        if head is None:
            continue
        at, name, fields = head
        same = same + 1 if at == last_at else 1
        last_at = at
        if after is not None:
            if at > after[0] or (at == after[0] and same <= after[1]):
                continue
            after = None
        if status is not None and status not in (name, fields.get("status")):
            continue
        if len(out) == limit:
            return Page(out, f"{place[0]}-{place[1]}")
        out.append(_record(at, name, fields))
        place = (at, same)
    return Page(out, None)
