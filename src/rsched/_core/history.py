"""A schedule's history as typed records, and its pages.

The scripts keep one compact record per run (or dropped occurrence) on the schedule's history
list, newest first, updated in place as the run goes on (lua/includes/rec_first.lua, docs/keys.md
"History records"); rsched before them pushed one JSON object per event, and a list may hold
both. :func:`stored_events` expands each record into the events it stands for, as the JSON
objects of old (``event`` and ``at`` always, the other fields by kind), and puts every event in
time order, newest first. :class:`HistoryEvent` reads each with datetimes instead of epoch ms,
and keeps every field it does not know in ``extra``, so events written by a newer rsched still
read.

A page's cursor is ``<at ms>-<n>``: continue after the n-th event recorded at that
millisecond. Events are read in Redis time order, so a cursor keeps its place while new
events arrive and old ones are trimmed (an event recorded in the very millisecond of the
cursor's may be seen twice, as with any cursor over a changing list).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

import orjson

from rsched._core.page import Page

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CURSOR = re.compile(r"^(-?\d{1,16})-(\d{1,9})$")
_TEXT_FIELDS = ("execution_id", "origin", "status", "reason", "error_type", "error")
_INT_FIELDS = ("late_ms", "attempt")


def fragment(fields: dict[str, Any]) -> str:
    """A JSON fragment (``,"k":v,…``) appended to a history event, or '' when empty."""
    return "," + orjson.dumps(fields).decode()[1:-1] if fields else ""


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
    ``failed``, ``timed_out``, ``retried``, ``dead``, ``cancelled``, ``expired`` (not started within
    its start deadline) (workers), or a name a newer
    rsched records. ``at`` is when it was recorded (Redis time); ``scheduled_at`` the
    occurrence's time, ``jittered_at`` when a schedule's ``jitter`` had it fire (``jitter_ms``
    after it, in ``extra``) and ``late_ms`` how late it fired after that; ``origin``
    (schedule, trigger, backfill, misfire, ...) how it came to run; ``reason`` why it was
    skipped or dead-lettered (``excluded``: by the exclusion calendar ``calendar`` names, in
    ``extra``). Every other field of the stored event is in ``extra`` as it was stored.
    Datetimes are aware UTC.
    """

    event: str
    at: datetime
    execution_id: str | None = None
    scheduled_at: datetime | None = None
    jittered_at: datetime | None = None
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
        elif key in ("scheduled_at", "jittered_at") and _whole(value) is not None:
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


# --- compact records (lua/includes/rec_first.lua) ------------------------------------------------

_RECORD = re.compile(r"^-?[0-9a-zA-Z]+\|")
#: Token code -> event name.
_CODES = {
    "f": "fired", "b": "buffered", "s": "skipped", "x": "cancel_requested", "e": "released",
    "m": "misfired", "r": "running", "c": "completed", "C": "cancelled", "F": "failed",
    "T": "timed_out", "R": "retried", "D": "dead", "W": "waiting", "E": "expired",
}  # fmt: skip
#: The fields of an occurrence's token, after its delta (origin '' = schedule).
_OCCURRENCE_FIELDS = {
    "f": ("origin", "missed", "jitter_ms"),
    "b": ("policy", "origin", "missed"),
    "s": ("reason", "policy", "origin", "missed", "into", "calendar"),
    "x": ("cancelled", "origin", "missed"),
}
#: The codes of run outcomes, and the fields of their tokens after the delta.
_OUTCOMES = frozenset("cCFTRDWE")
_OUTCOME_FIELDS = (
    "duration_ms", "attempt", "retry_in_ms", "reason", "error_type", "error", "deliveries", "by",
)  # fmt: skip
_NUMBERS = frozenset(("missed", "attempt", "retry_in_ms", "deliveries", "jitter_ms"))
_EXEC_FIELDS = frozenset(("cancelled", "after", "by", "into"))
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_VALUE = {c: i for i, c in enumerate(_DIGITS)}


def _b62(text: str) -> int:
    """A record's number (base 62, '-' in front when negative); ValueError when it is not one."""
    sign, digits = (-1, text[1:]) if text.startswith("-") else (1, text)
    if not digits.isascii() or not digits.isalnum():
        raise ValueError(f"not a number: {text!r}")
    value = 0
    for c in digits:
        value = value * 62 + _VALUE[c]
    return sign * value


def _values(names: tuple[str, ...], raw: list[str], sid: str, sched: int) -> dict[str, Any]:
    """The named fields of a token that are present, decoded."""
    out: dict[str, Any] = {}
    for name, text in zip(names, raw, strict=False):
        if not text:
            continue
        if name in _EXEC_FIELDS:  # another run of this schedule, by its scheduled ms
            out[name] = unquote(text[1:]) if text.startswith("=") else f"{sid}@{sched + _b62(text)}"
        elif name in _NUMBERS:
            out[name] = _b62(text)
        elif name == "duration_ms":
            out[name] = float(_b62(text))
        else:
            out[name] = unquote(text)
    return out


def _token_event(code: str, at: int, raw: list[str], sid: str, sched: int) -> dict[str, Any]:
    name, exec_id = _CODES[code], f"{sid}@{sched}"
    if code in _OCCURRENCE_FIELDS:
        fields = _values(_OCCURRENCE_FIELDS[code], raw, sid, sched)
        origin, missed = fields.pop("origin", "schedule"), fields.pop("missed", None)
        # A jittered occurrence was due its delay after its time: it is late from then on.
        jitter = fields.get("jitter_ms", 0)
        event = {"event": name, **fields, "scheduled_at": sched, "at": at,
                 "late_ms": at - sched - jitter, "execution_id": exec_id,
                 "origin": origin}  # fmt: skip
        if jitter:
            event["jittered_at"] = sched + jitter
        return event if missed is None else {**event, "missed": missed}
    if code == "m":
        fields = _values(("policy", "missed", "reason"), raw, sid, sched)
        return {"event": name, **fields, "scheduled_at": sched, "at": at, "late_ms": at - sched}
    if code == "e":
        fields = _values(("origin", "after"), raw, sid, sched)
        origin, after = fields.get("origin", "schedule"), fields.get("after", "")
        event = {"event": name, "execution_id": exec_id, "scheduled_at": sched, "at": at,
                 "origin": origin, "after": after}  # fmt: skip
        return event if event["after"] else {**event, "reason": "marker_expired"}
    head = {"event": name, "execution_id": exec_id, "attempt": 1, "at": at}
    if code == "r":
        return {**head, "deliveries": 1, **_values(("attempt", "deliveries"), raw, sid, sched)}
    return {**head, **_values(_OUTCOME_FIELDS, raw, sid, sched)}


def expand_record(text: str, schedule_id: str) -> list[dict[str, Any]]:
    """The events (oldest first) one compact record of ``schedule_id``'s history stands for, as
    the JSON objects rsched wrote per event before; a token this version does not know (a newer
    rsched's) is left out, a malformed one ends the record there."""
    head, *tokens = text.split("|")
    events: list[dict[str, Any]] = []
    try:
        sched = _b62(head)
        for token in tokens:
            code, (delta, *raw) = token[:1], token[1:].split(",")
            at = sched + _b62(delta)
            if code in _OUTCOMES and raw and raw[0]:
                at += _b62(raw[0])  # an outcome's delta counts from its start
            if code in _CODES:
                events.append(_token_event(code, at, raw, schedule_id, sched))
    except ValueError:
        pass
    return events


def _newest_first(event: object) -> float:
    at = _whole(event.get("at")) if isinstance(event, dict) else None
    return math.inf if at is None else -at


def stored_events(items: Iterable[str | bytes], schedule_id: str) -> list[Any]:
    """The events of a schedule's stored history (its list's items as read), newest first:
    records expanded, events stored as JSON decoded. An item that is neither
    (someone else's write) comes last, as ``{"event": "unreadable", "raw": item}`` or as the JSON
    it holds; :func:`page_events` leaves those out."""
    out: list[Any] = []
    for item in items:
        text = item.decode(errors="replace") if isinstance(item, bytes) else item
        if _RECORD.match(text):
            out.extend(reversed(expand_record(text, schedule_id)))
            continue
        try:
            event = orjson.loads(text)
        except orjson.JSONDecodeError:
            out.append({"event": "unreadable", "raw": text})
            continue
        out.append(event)
    out.sort(key=_newest_first)  # stable: a record's events and equal times keep their order
    return out
