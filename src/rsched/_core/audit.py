"""The audit trail and the spec history: who changed what, when and from where (docs/audit.md).

Every change of a schedule, an exclusion calendar or a limit override appends one record to a
capped stream, written by the script that makes the change (lua/includes/audit.lua), so a
record exists exactly when the change does. The author of a change (its actor and source)
travels with the call in a context variable set by the client around each of its methods: the
stores read it when they call a script, and nothing below the client needs an argument for it.

A record is one stream entry, one field ``a`` holding a JSON array (AUDIT_FIELDS order): the
action, the id (a schedule's, a calendar's name, a limit key), the actor (null when none was
given), the source, the generation before and after (null where none), the fields changed as an
object name -> [old, new] (null for a field absent on that side), a note (a trigger's
execution id, a backfill's occurrences) and, for the schedules a bulk write created (one record
per script call), the list of their ids. The entry id is when it happened (Redis TIME).

Pure: no I/O.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from rsched._core.rules import ACTOR_MAX_CHARS, NAME_RE, check_actor

#: The record's values, in the order of its JSON array (lua/includes/audit.lua).
AUDIT_FIELDS = ("action", "id", "actor", "source", "before", "after", "changes", "note", "ids")
#: Every action a record names.
ACTIONS = (
    "add", "update", "upsert", "sync", "remove", "pause", "resume", "trigger", "backfill",
    "rollback", "calendar_set", "calendar_remove", "limit_set", "limit_clear",
)  # fmt: skip
#: Where a change came from: the SDK, the ``rsched`` command, the dashboard or HTTP API, a
#: schedules file (``sync:<source name>``).
SOURCES = ("sdk", "cli", "web")
#: Specs of each schedule kept in its spec history by default (``spec_history_limit``).
DEFAULT_SPEC_HISTORY = 20
#: A value longer than this is recorded as its digest and length (lua/includes/audit.lua).
VALUE_MAX_CHARS = 64

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Author:
    """Who makes the changes of a call (``actor``, None when nobody was named) and from where
    (``source``: ``sdk``, ``cli``, ``web``, ``sync:<source name>``)."""

    actor: str | None = None
    source: str = "sdk"

    def arg(self, action: str | None, cap: int, specs: int) -> str:
        """The one script argument that carries the author, the action (None: the script
        names it), the audit stream's cap and the spec history's length."""
        doc: dict[str, Any] = {"s": self.source, "n": cap, "h": specs}
        if self.actor:
            doc["w"] = self.actor
        if action:
            doc["a"] = action
        return orjson.dumps(doc).decode()


_AUTHOR: ContextVar[Author | None] = ContextVar("rsched_author", default=None)
_NOBODY = Author()


def current_author() -> Author:
    """The author of the changes being made now (the client call's; nobody named, from the
    SDK, outside one)."""
    return _AUTHOR.get() or _NOBODY


@contextlib.contextmanager
def authored(author: Author) -> Iterator[None]:
    """Make ``author`` the author of the changes made inside."""
    token = _AUTHOR.set(author)
    try:
        yield
    finally:
        _AUTHOR.reset(token)


def check_source(value: object) -> str:
    """A source: ``sdk``, ``cli``, ``web`` or ``sync:<name>``."""
    if isinstance(value, str) and (
        value in SOURCES or (value.startswith("sync:") and NAME_RE.match(value[5:]))
    ):
        return value
    raise ValueError(f"{value!r} is not a source; give sdk, cli, web or sync:<schedules file>")


def safe_actor(raw: str) -> str | None:
    """``raw`` made a valid actor (other characters become ``_``), None when empty."""
    text = "".join(c if NAME_RE.match(c) or c in "@+/" else "_" for c in raw)[:ACTOR_MAX_CHARS]
    return check_actor(text) if text else None


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One change in the audit trail (:meth:`rsched.Client.audit`).

    ``at`` is when it happened (Redis time); ``action`` what was done (ACTIONS); ``id`` to what:
    a schedule's id, an exclusion calendar's name (``calendar_*``) or a limit key or pattern
    (``limit_*``); ``actor`` who (None when the writer named nobody) and ``source`` from where
    (``sdk``, ``cli``, ``web``, ``sync:<source>``). ``generation_before`` / ``_after`` are the
    schedule's generation around the change (None: it did not exist before / after).
    ``changes`` maps each field that changed to (old, new) as stored (None: absent on that side;
    a value over 64 characters reads ``#<sha1 prefix> <length>B``). ``note`` says more: a
    trigger's execution id, a backfill's occurrences, how many a bulk write created. ``ids``:
    every schedule a bulk write (``add_many``, ``upsert_many``, a schedules file's sync)
    created, one record for the call (``id`` is the first; their specs are their first
    generation's, in each schedule); empty for a record of one.
    """

    at: datetime
    action: str
    id: str
    actor: str | None = None
    source: str = ""
    generation_before: int | None = None
    generation_after: int | None = None
    changes: Mapping[str, tuple[str | None, str | None]] = field(default_factory=dict)
    note: str | None = None
    ids: tuple[str, ...] = ()
    entry_id: str = ""

    def about(self, name: str) -> bool:
        """Whether the record is about ``name`` (its id, or one of a bulk create's ids)."""
        return self.id == name or name in self.ids

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data (``at`` in ISO 8601, changes as [old, new])."""
        return {
            "at": self.at.isoformat(),
            "action": self.action,
            "id": self.id,
            "actor": self.actor,
            "source": self.source,
            "generation_before": self.generation_before,
            "generation_after": self.generation_after,
            "changes": {k: list(v) for k, v in self.changes.items()},
            "note": self.note,
            **({"ids": list(self.ids)} if self.ids else {}),
        }

    def summary(self) -> str:
        """The changes on one line: ``field old -> new; ...``."""
        parts = []
        for name, (old, new) in self.changes.items():
            parts.append(f"{name} {_shown(old)} -> {_shown(new)}")
        return "; ".join(parts)


def _shown(value: str | None) -> str:
    return "-" if value is None else value


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def audit_record(entry_id: str, fields: Mapping[str, str]) -> AuditRecord | None:
    """A stored record, or None when the entry is not one (someone else wrote it)."""
    try:
        data = orjson.loads(fields.get("a", ""))
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, list) or len(data) < 2:
        return None
    row = dict(zip(AUDIT_FIELDS, data, strict=False))
    ms = entry_id.split("-", 1)[0]
    action, target = _text(row.get("action")), _text(row.get("id"))
    if not ms.isdigit() or action is None or target is None:
        return None
    changes: dict[str, tuple[str | None, str | None]] = {}
    raw = row.get("changes")
    if isinstance(raw, dict):
        for name, pair in raw.items():
            if isinstance(pair, list) and len(pair) == 2:
                changes[str(name)] = (_value(pair[0]), _value(pair[1]))
    return AuditRecord(
        at=_EPOCH + timedelta(milliseconds=int(ms)),
        action=action,
        id=target,
        actor=_text(row.get("actor")),
        source=_text(row.get("source")) or "",
        generation_before=_whole(row.get("before")),
        generation_after=_whole(row.get("after")),
        changes=changes,
        note=_text(row.get("note")),
        ids=tuple(i for i in row.get("ids") or () if isinstance(i, str))
        if isinstance(row.get("ids"), list)
        else (),
        entry_id=entry_id,
    )


def _value(value: object) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else orjson.dumps(value).decode()


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """What a read of the audit trail keeps: every given condition must hold."""

    id: str | None = None
    actor: str | None = None
    since_ms: int | None = None

    def keeps(self, record: AuditRecord) -> bool:
        return (self.id is None or record.about(self.id)) and (
            self.actor is None or record.actor == self.actor
        )


@dataclass(frozen=True, slots=True)
class SpecVersion:
    """One kept spec of a schedule (:meth:`rsched.Client.spec_history`): its ``generation``,
    when it was written (``at``), by whom (``actor``, None when unknown: the spec a schedule had
    before its first change was kept only from that change on) and from where (``source``), and
    ``spec``, the schedule's stored spec fields (as in its hash: strings)."""

    generation: int
    at: datetime
    actor: str | None
    source: str | None
    spec: Mapping[str, str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "source": self.source,
            "spec": dict(self.spec),
        }


def spec_version(raw: str) -> SpecVersion | None:
    """One entry of a schedule's spec history (a JSON array [generation, ms, actor, source,
    {field: value}]), or None when it is not one."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, list) or len(data) != 5:
        return None
    gen, ms, actor, source, spec = data
    if _whole(gen) is None or _whole(ms) is None or not isinstance(spec, dict):
        return None
    return SpecVersion(
        generation=gen,
        at=_EPOCH + timedelta(milliseconds=ms),
        actor=_text(actor),
        source=_text(source),
        spec={str(k): v for k, v in spec.items() if isinstance(v, str)},
    )
