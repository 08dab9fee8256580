"""Declarative schedules: make Redis match a TOML file of schedules.

A schedules file::

    source = "billing"            # optional; default "file:<file name without .toml>"

    [defaults]                    # optional; fields every entry starts from
    timezone = "Europe/Rome"

    [[schedule]]
    id = "nightly-report"
    task = "reports.nightly"
    cron = "0 2 * * *"
    payload = { kind = "sales" }

    [[schedule]]
    id = "poll-feeds"
    task = "feeds.poll"
    every = "5m"                  # seconds (300) or 90s, 5m, 1h30m, 2d (any duration field)
    payload = { customer_id = 42 }
    # flow-control limits its jobs hold (docs/limits.md); a key's {field} comes from the payload
    limits = [{ key = "crm", rate = "100/m" }, { key = "customer:{customer_id}", concurrency = 1 }]

Syncing adds what is new, replaces what changed (bumping its generation), leaves unchanged
schedules untouched and removes the schedules this file created earlier that it no longer lists.
Schedules created through the SDK or by another file are never touched: an id the file shares
with one is a conflict (unless ``adopt``). Ownership is the ``source`` field of each schedule
plus a per-source set of ids (so removals need no scan). The whole file is checked before
anything is written: one bad entry fails the sync with every problem listed.

Two files with the same name (``a/jobs.toml``, ``b/jobs.toml``) and no ``source`` share the
default source. The resolved path of the file last synced under a source is recorded, and a
sync that would remove or change schedules while another file of that name, at the recorded
path, still exists here is refused: each file needs a ``source`` of its own then. The default
is not derived from the path because paths change between hosts and release directories,
which would turn every deploy into a conflict with the schedules the file created before.
"""

from __future__ import annotations

import contextlib
import functools
import re
import tomllib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import orjson
from redis.asyncio import Redis

from rsched._core import humanize as fmt
from rsched._core.audit import Author, authored
from rsched._core.bulk import item_of
from rsched._core.errors import (
    Conflict,
    InvalidSchedule,
    InvalidSchedules,
    ScheduleExists,
    ScheduleFileError,
    ScheduleNotFound,
)
from rsched._core.http_target import masked
from rsched._core.log import EventLogger, get_logger
from rsched._core.partitions import partition_of
from rsched._core.rules import check_name, encode_payload
from rsched._core.schedule import DURATION_FIELDS, STATE_FIELDS, Schedule, passed_part
from rsched._core.settings import Settings
from rsched._core.timing import first_run_ms
from rsched._core.words import Words, speaking
from rsched._store.partitions import Partitions, gather, save_many
from rsched._store.schedules import no_calendar
from rsched._store.sources import SourceStore

S = TypeVar("S")
T = TypeVar("T")

_log = get_logger("rsched.sync")
_TOP_LEVEL = {"source", "defaults", "schedule"}
_ENTRY = re.compile(r"^schedule\[(\d+)\]")
#: Operator-owned fields: a file that does not set them leaves them as they are.
_OPERATOR_FIELDS = frozenset({"paused", "pause_note"})
_NOT_IN_FILE = STATE_FIELDS | {"source"}
APPLY_ATTEMPTS = 5
#: A schedules file's messages name its keys and show TOML (``_core/words.py``).
FILE_WORDS = Words(
    setting='{name} = "{value}"',
    one_trigger='cron = "0 2 * * *", every = "5m" or at = 2030-01-01T09:00:00Z',
    durations='seconds (300) or text such as "90s", "5m", "1h30m" or "2d"',
    exists="rename it in the file, or sync with --adopt to take it over",
    run_now="use rsched enqueue to run a job now",
    set_calendar="rsched calendar set {name} --date YYYY-MM-DD",
    unknown_field="check the spelling; a schedule's keys are "
    + ", ".join(sorted(set(Schedule.model_fields) - _NOT_IN_FILE)),
    json_object='a table, e.g. payload = { kind = "sales" }',
    limits='limits = [{ key = "crm", rate = "100/m" }]',
)


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between the file and Redis.

    ``action``: add, update, adopt (take over a schedule the file did not create; only with
    ``adopt``) or remove. ``diff`` maps each changed field to (old, new).
    """

    action: str
    schedule_id: str
    schedule: Schedule | None = None
    diff: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    generation: int = 0

    def describe(self) -> str:
        if self.action == "remove":
            return "no longer in the file"
        if self.action == "add" and self.schedule is not None:
            return _summary(self.schedule)
        parts = [f"{k}: {_show(old, k)} -> {_show(new, k)}" for k, (old, new) in self.diff.items()]
        return "; ".join(parts) or "source only"


@dataclass(slots=True)
class SyncPlan:
    """What a sync does (or did: ``applied``). ``lines()`` renders it for people."""

    path: str
    source: str
    changes: list[Change] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    applied: bool = False

    def ids(self, action: str) -> list[str]:
        return [c.schedule_id for c in self.changes if c.action == action]

    def summary(self) -> str:
        counts = {a: len(self.ids(a)) for a in ("add", "update", "adopt", "remove")}
        parts = [f"{n} to {a}" for a, n in counts.items() if n or a != "adopt"]
        return f"{', '.join(parts)}, {len(self.unchanged)} unchanged"

    def lines(self) -> list[str]:
        signs = {"add": "+", "update": "~", "adopt": "~", "remove": "-"}
        head = f"{self.path} (source {self.source}): {self.summary()}"
        if not self.applied:
            head += " [not applied]"
        width = max((len(c.schedule_id) for c in self.changes), default=0)
        body = [
            f"  {signs[c.action]} {c.action:<6} {c.schedule_id:<{width}}  {c.describe()}"
            for c in self.changes
        ]
        return [head, *body]

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "source": self.source,
            "applied": self.applied,
            "changes": [
                {
                    "action": c.action,
                    "id": c.schedule_id,
                    "diff": {k: [_json(o), _json(n)] for k, (o, n) in c.diff.items()},
                }
                for c in self.changes
            ],
            "unchanged": self.unchanged,
        }


def default_source(path: Path) -> str:
    return f"file:{path.stem}"


@dataclass(slots=True)
class ParsedFile:
    """A schedules file read and checked on its own (no Redis): its valid schedules and every
    problem found. ``where`` names each id's entry for messages (``schedule[3] (id 'x')``)."""

    path: str
    resolved: str
    source: str
    explicit_source: bool
    schedules: list[Schedule] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    where: dict[str, str] = field(default_factory=dict)
    #: Each invalid entry's valid part (``where`` and the schedule the fields that passed
    #: make), so that the checks against Redis (an ``at`` in the past) also reach it.
    partial: list[tuple[str, Schedule]] = field(default_factory=list)


def load_file(path: str | Path) -> tuple[str, list[Schedule]]:
    """Parse and validate a schedules file; returns (source name, schedules with that source).

    Raises ScheduleFileError listing every problem (entry index, id and field).
    """
    parsed = read_file(path)
    if parsed.errors:
        raise ScheduleFileError(str(path), parsed.errors)
    return parsed.source, parsed.schedules


def parse_file(path: str | Path) -> tuple[str, list[Schedule], list[tuple[str, str]]]:
    """(source name, the valid schedules, every problem found); see :func:`read_file`."""
    parsed = read_file(path)
    return parsed.source, parsed.schedules, parsed.errors


def read_file(path: str | Path) -> ParsedFile:
    """Read a schedules file and check every entry and every field of it, collecting every
    problem. Raises ScheduleFileError only when the file cannot be read or is not TOML."""
    with speaking(FILE_WORDS):
        return _read_file(str(path))


def _read_file(path: str) -> ParsedFile:
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScheduleFileError(str(p), [("", f"cannot read the file ({exc.strerror})")]) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ScheduleFileError(str(p), [("", f"not valid TOML: {exc}")]) from None
    errors: list[tuple[str, str]] = []
    for key in sorted(set(doc) - _TOP_LEVEL):
        errors.append(
            (key, "unknown top-level key; use source, [defaults] and [[schedule]] entries")
        )
    explicit = "source" in doc
    source = doc.get("source", default_source(p))
    try:
        source = check_name(source, "source name")
    except ValueError as exc:
        errors.append(("source", str(exc)))
        source = default_source(p)
    parsed = ParsedFile(path, str(p.resolve()), source, explicit, errors=errors)
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        errors.append(("defaults", "must be a table: [defaults]"))
        defaults = {}
    entries = doc.get("schedule", [])
    if not isinstance(entries, list):
        errors.append(("schedule", "write each schedule as a [[schedule]] table"))
        entries = []
    for name in sorted(set(defaults) & {"id"} | set(defaults) & _NOT_IN_FILE):
        errors.append((f"defaults.{name}", "cannot have a default"))
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            errors.append((f"schedule[{index}]", "write each schedule as a [[schedule]] table"))
            continue
        where = f"schedule[{index}]" + (f" (id {entry['id']!r})" if "id" in entry else "")
        # By the id as written, so that a repeat is named whether or not either entry is valid.
        raw_id = entry.get("id")
        first = seen.setdefault(raw_id, index) if isinstance(raw_id, str) else index
        repeated = first != index
        if repeated:
            errors.append((f"{where}.id", f"duplicate id, also used by schedule[{first}]"))
        s = _check_entry(where, {**defaults, **entry}, source, parsed)
        if s is not None and repeated:
            parsed.partial.append((where, s))
        if s is None or repeated:
            continue
        parsed.where[s.id] = where
        parsed.schedules.append(s)
    return parsed


def _check_entry(
    where: str, spec: dict[str, Any], source: str, parsed: ParsedFile
) -> Schedule | None:
    """The entry as a schedule, or None after adding each of its problems to ``parsed.errors``
    (and its valid part to ``parsed.partial``)."""
    errors = parsed.errors
    before = len(errors)
    for name in sorted(set(spec) & _NOT_IN_FILE):
        errors.append((f"{where}.{name}", "is maintained by rsched; remove it from the file"))
        spec.pop(name)
    spec["source"] = source
    try:
        s = Schedule(**spec)
    except InvalidSchedule as exc:
        errors.extend((f"{where}.{f}" if f else where, msg) for f, msg in exc.errors)
        part = passed_part(spec, {f.split(".")[0] for f, _ in exc.errors if f})
        if part is not None:
            parsed.partial.append((where, part))
        return None
    return s if len(errors) == before else None


def _compare(old: Schedule, new: Schedule) -> dict[str, tuple[Any, Any]]:
    keep = set(new.model_fields_set) & _OPERATOR_FIELDS
    skip = STATE_FIELDS | (_OPERATOR_FIELDS - keep)
    a, b = old.model_dump(exclude=set(skip)), new.model_dump(exclude=set(skip))
    return {k: (a[k], b[k]) for k in b if a.get(k) != b[k]}


async def _source_ids(parts: Partitions, source: str) -> set[str]:
    """The ids a schedules file synced, from every partition's index of them."""
    found = await parts.each(lambda k: parts.sources[k].ids(source))
    return {sid for some in found for sid in some}


async def _per_partition(
    stores: Sequence[S],
    ids: Sequence[str],
    read: Callable[[S, list[str]], Awaitable[list[T]]],
) -> dict[str, T]:
    """``read(store, its ids)`` with the store of each partition (``stores``, in partition
    order) holding some of ``ids``, all at once."""
    groups: dict[int, list[str]] = {}
    for sid in ids:
        groups.setdefault(partition_of(sid, len(stores)), []).append(sid)
    found = await gather([functools.partial(read, stores[k], some) for k, some in groups.items()])
    return {sid: v for some, got in zip(groups.values(), found, strict=True)
            for sid, v in zip(some, got, strict=True)}  # fmt: skip


async def plan_sync(parts: Partitions, parsed: ParsedFile, *, adopt: bool = False) -> SyncPlan:
    """Compare the file with Redis. Raises ScheduleFileError listing the file's own problems
    plus conflicts, payloads over this deployment's limit, entries that cannot be created (an
    ``at`` in the past) and changes that would cross into a same-named file's schedules."""
    with speaking(FILE_WORDS):
        return await _plan_sync(parts, parsed, adopt)


async def _plan_sync(parts: Partitions, parsed: ParsedFile, adopt: bool) -> SyncPlan:
    source, path = parsed.source, parsed.path
    plan = SyncPlan(path=path, source=source)
    owned = await _source_ids(parts, source)
    wanted = {s.id: s for s in parsed.schedules}
    ids = sorted(set(wanted) | owned | {s.id for _, s in parsed.partial})
    stored = await _per_partition(parts.schedules, ids, lambda store, some: store.fields(some))
    store = parts.schedules[0]
    now = await store.time_ms()
    errors = list(parsed.errors)
    named = sorted({c for s in parsed.schedules for c in s.exclude})
    missing = set(await parts.calendars.missing(named))
    for where, part in parsed.partial:
        if not stored[part.id]:
            errors += _first_run_errors(where, part, now)
    for sid, new in wanted.items():
        where = parsed.where.get(sid, f"schedule {sid!r}")
        try:
            encode_payload(new.payload, store.max_payload_bytes)
        except ValueError as exc:
            errors.append((f"{where}.payload", str(exc)))
        if lacking := [c for c in new.exclude if c in missing]:
            field, message = no_calendar(lacking)
            errors.append((f"{where}.{field}", message))
        found = stored[sid]
        if not found:
            errors += _first_run_errors(where, new, now)
            plan.changes.append(Change("add", sid, new))
            continue
        old = Schedule.from_hash(sid, found)
        diff = _compare(old, new)
        if old.source != source:
            owner = f"the file with source {old.source!r}" if old.source else "the SDK or CLI"
            if not adopt:
                errors.append(
                    (
                        where,
                        f"already exists, created by {owner}; rename it in the file, remove "
                        "the existing one, or sync with --adopt to take it over",
                    )
                )
                continue
            diff["source"] = (old.source, source)
            plan.changes.append(Change("adopt", sid, _carry(old, new), diff, old.generation))
        elif diff:
            plan.changes.append(Change("update", sid, _carry(old, new), diff, old.generation))
        else:
            plan.unchanged.append(sid)
    for sid in sorted(owned - set(wanted)):
        found = stored[sid]
        if found and found.get("source") == source:
            plan.changes.append(Change("remove", sid))
    errors += await _crossing(parts.sources[0], parsed, plan)
    if errors:
        raise ScheduleFileError(path, sorted(errors, key=_position))
    return plan


def _first_run_errors(where: str, new: Schedule, now: int) -> list[tuple[str, str]]:
    """What keeps a new schedule from being created now (an ``at`` or ``end_at`` past)."""
    try:
        first_run_ms(new, now, creating=True)
    except InvalidSchedule as exc:
        return [(f"{where}.{f}", m) for f, m in exc.errors]
    return []


def _position(error: tuple[str, str]) -> int:
    """The entry an error is about (-1: the file as a whole), to list them in file order."""
    found = _ENTRY.match(error[0])
    return int(found.group(1)) if found else -1


async def _crossing(
    sources: SourceStore, parsed: ParsedFile, plan: SyncPlan
) -> list[tuple[str, str]]:
    """A file without ``source`` must not remove or change what another file of the same name
    synced (see the module doc)."""
    if parsed.explicit_source:
        return []
    other = await sources.path(parsed.source)
    touched = [c.schedule_id for c in plan.changes if c.action in ("remove", "update")]
    if not other or other == parsed.resolved or not touched:
        return []
    if not await anyio.Path(other).is_file():
        return []  # moved, or synced from another host: this file takes the source over
    shown = ", ".join(touched[:5]) + (f" and {len(touched) - 5} more" if len(touched) > 5 else "")
    return [
        (
            "source",
            f"not set, so this file uses {parsed.source!r}, the default for its file name, "
            f"which {other} synced last; this sync would remove or change {len(touched)} of "
            f"that file's schedules ({shown}). Give each file its own name with "
            f'source = "..." at the top (if {other} is an old copy of this file, add '
            f"source = {parsed.source!r} to this one)",
        )
    ]


def _carry(old: Schedule, new: Schedule) -> Schedule:
    """Keep an operator's pause unless the file says otherwise."""
    if "paused" in new.model_fields_set:
        return new
    return new.model_copy(update={"paused": old.paused, "pause_note": old.pause_note})


async def apply_plan(parts: Partitions, plan: SyncPlan, resolved: str = "") -> None:
    """Write the plan: adds and updates in one bulk write, then removals. Raises Conflict
    when a schedule changed after the plan was made (sync_file plans again).

    Each partition has its own index of the file's ids (the ids of its schedules)."""
    source = plan.source
    writes = [c for c in plan.changes if c.action != "remove" and c.schedule is not None]

    async def index(sources: SourceStore, ids: list[str]) -> list[None]:
        await sources.add_ids(source, ids)
        return [None] * len(ids)

    # Index first: a crash between the two leaves an extra id (checked against the hash's
    # source on every sync), never a schedule of this file that the index does not know.
    await _per_partition(parts.sources, [c.schedule_id for c in writes], index)
    items = [
        item_of(
            c.schedule,
            index=n,
            mode="add" if c.action == "add" else "replace",
            expect_gen=None if c.action == "add" else c.generation,
        )
        for n, c in enumerate(writes)
        if c.schedule is not None
    ]
    outcomes = await save_many(parts, items, upsert=False)
    lost = sorted(sid for sid, got in outcomes.items() if got not in ("created", "replaced"))
    if lost:
        raise Conflict(f"changed while the sync wrote them: {', '.join(lost)}")
    for change in plan.changes:
        if change.action != "remove":
            continue
        sid = change.schedule_id
        sources = parts.sources_of(sid)
        # Re-check just before: the id may have been re-created by someone else meanwhile.
        if await sources.source_of(sid) == source:
            with contextlib.suppress(ScheduleNotFound):
                await parts.of_schedule(sid).remove(sid)
        await sources.forget(source, sid)
    # Ids of this source whose schedule was removed by hand: forget them.
    ids = sorted(await _source_ids(parts, source))
    hashes = await _per_partition(parts.schedules, ids, lambda store, some: store.read_hashes(some))
    for sid in ids:
        found = hashes[sid]
        if found is not None and found.get("source") != source:
            await parts.sources_of(sid).forget(source, sid)
    if resolved:
        await parts.sources[0].set_path(source, resolved)
    plan.applied = True


async def sync_file(
    redis: Redis,
    settings: Settings,
    path: str | Path,
    *,
    dry_run: bool = False,
    adopt: bool = False,
    log: EventLogger | None = None,
    actor: str | None = None,
) -> SyncPlan:
    """Make Redis match the schedules file at ``path``; returns the plan (``applied`` unless
    ``dry_run``). Every difference is logged before it is applied.

    Raises ScheduleFileError (nothing applied) when the file is invalid or an id conflicts
    with a schedule the file did not create (pass ``adopt=True`` to take those over). The audit
    trail records its changes as from ``sync:<source>``, by ``actor`` (default: the settings'
    ``actor``).
    """
    parts = await Partitions.of(redis, settings)
    return await sync_parsed(
        parts, settings, read_file(path), dry_run=dry_run, adopt=adopt, log=log, actor=actor
    )


def read_schedules(
    label: str, source: str, schedules: Sequence[tuple[int, Schedule]]
) -> ParsedFile:
    """Schedules built in code (an application's settings), each with its index in the list
    given, as a file of ``source`` named ``label`` in messages; a repeated id is one of its
    problems."""
    parsed = ParsedFile(label, "", source, explicit_source=True)
    for index, s in schedules:
        where = f"schedule[{index}] (id {s.id!r})"
        if s.id in parsed.where:
            parsed.errors.append(
                (f"{where}.id", f"duplicate id, also used by {parsed.where[s.id]}")
            )
            continue
        parsed.where[s.id] = where
        parsed.schedules.append(s.model_copy(update={"source": source}))
    return parsed


async def sync_parsed(
    parts: Partitions,
    settings: Settings,
    parsed: ParsedFile,
    *,
    dry_run: bool = False,
    adopt: bool = False,
    prune: bool = True,
    log: EventLogger | None = None,
    actor: str | None = None,
) -> SyncPlan:
    """:func:`sync_file` of schedules already read; ``prune=False`` keeps the schedules the
    source created earlier and no longer lists (they are neither removed nor forgotten)."""
    log = log or _log
    source = parsed.source
    for attempt in range(APPLY_ATTEMPTS):
        plan = await plan_sync(parts, parsed, adopt=adopt)
        if not prune:
            plan.changes = [c for c in plan.changes if c.action != "remove"]
        for change in plan.changes:
            log.info(
                f"sync.{change.action}",
                id=change.schedule_id,
                source=source,
                detail=change.describe(),
                dry_run=dry_run,
            )
        if dry_run:
            return plan
        try:
            with authored(Author(actor or settings.actor, f"sync:{source}")):
                await apply_plan(parts, plan, parsed.resolved)
        except (Conflict, ScheduleExists, InvalidSchedules):
            # Another process (a second scheduler starting with the same file) wrote first.
            if attempt == APPLY_ATTEMPTS - 1:
                raise
            log.info("sync.retry", source=source, reason="changed meanwhile")
            continue
        log.info("sync.done", source=source, path=parsed.path, summary=plan.summary())
        return plan
    raise AssertionError("unreachable")


def _summary(s: Schedule) -> str:
    every = f"every {fmt.duration(s.every * 1000)}" if s.every else ""
    trigger = f"cron {s.cron!r}" if s.cron else every or f"at {s.at}"
    zone = f" {s.timezone}" if s.timezone != "UTC" else ""
    return f"{trigger}{zone} -> {fmt.task_text(s)} (queue {s.queue})"


def _show(value: Any, name: str) -> str:
    """A field's value in a plan line: a duration as 5m, anything else as its JSON value."""
    if name in DURATION_FIELDS and isinstance(value, int | float):
        return fmt.duration(value * 1000)
    if name == "limits" and isinstance(value, list):  # as the file writes them
        tables = (
            ", ".join(f"{k} = {orjson.dumps(v).decode()}" for k, v in lim.items() if v is not None)
            for lim in value
            if isinstance(lim, dict)
        )
        return "[" + ", ".join(f"{{ {t} }}" for t in tables) + "]"
    if name == "http" and isinstance(value, dict):
        value = masked(value)
    return repr(_json(value))


def _json(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
