"""The runs log across schedules and enqueued jobs: its records, reading it, and trimming it.

Runs that ended (completed, a failed or timed-out attempt, a retry, dead, cancelled) and
occurrences that were dropped (skipped) each leave one compact record on the capped stream
``{p}:runs``, written by the script that records the outcome (so it is atomic with the XACK);
see docs/keys.md. Runs still in progress are not logged (an on-time fire must not pay for the
log): they are read from the queue streams instead, ``fired`` while their entry waits and
``started`` once a worker holds it (the entry is pending in the consumer group).

A read walks the stream newest first with XREVRANGE and filters; it looks at most ``scan_max``
records per call, so a filter that matches rarely answers with fewer items than asked for and a
cursor to go on from. The cursor is the id of the last record looked at.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

import orjson
from redis.asyncio import Redis
from redis.exceptions import ResponseError, WatchError

from rsched._core.keys import GROUP, Keys
from rsched._core.page import Page
from rsched._core.rules import PRIORITIES, label_pairs, read_labels
from rsched._redis.scripts import ScriptCaller

#: Statuses of runs in progress, read from the queue streams rather than the log.
LIVE_STATUSES = ("fired", "started")
#: The record's values, in the order of its JSON array (lua/includes/run_log.lua); trailing
#: nulls are left out, so a record has 1 to 11 values.
RUN_FIELDS = (
    "exec", "status", "task", "worker", "dur", "fired", "attempt", "queue", "etype", "error",
    "named",
)  # fmt: skip
#: The twelve values of a record as earlier versions wrote it (still read).
OLD_RUN_FIELDS = (
    "exec", "sid", "task", "queue", "status", "sched", "fired", "attempt", "worker", "dur",
    "etype", "error",
)  # fmt: skip
#: The queue a record leaves out (null).
DEFAULT_QUEUE = "default"
#: Records one read looks at, at most (the bound of a filtered scan).
SCAN_MAX = 10_000
#: Entries of each queue stream a read looks at for runs in progress, at most.
LIVE_MAX = 1_000
#: Characters of an error message kept in a record.
ERROR_MAX = 200
#: A worker's event -> the run's status in the log.
EVENT_STATUS = {"retry": "retried"}

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CURSOR = re.compile(r"^(\d{1,20}-\d{1,20}(\.\d{1,3})?|\+)$")
#: Characters every JSON encoder writes as they are (RunFilter.needles).
_PLAIN = re.compile(r"^[A-Za-z0-9 ._:@~#+-]*$")
#: Entries one read of a scan looks at (XREVRANGE, or lua/runs_scan.lua: 1-1.5 ms of the server).
_CHUNK = 500
#: What a log's entry reads as (scan_newest).
R = TypeVar("R")

Entry = tuple[str, dict[str, str]]


def _dt(ms: int | None) -> datetime | None:
    return None if ms is None else _EPOCH + timedelta(milliseconds=ms)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run in the runs log (see :meth:`rsched.Client.runs`).

    ``status`` is one of ``fired`` (queued), ``started`` (a worker holds it), ``completed``,
    ``failed`` / ``timed_out`` (an attempt that will be retried), ``retried`` (the handler
    raised :class:`rsched.Retry`), ``dead``, ``cancelled``, ``skipped`` (the occurrence did not
    run; ``reason`` says why: ``overlap``, ``buffer_full``, ``misfire``, ``catch_up_limit``,
    ``debounced`` (merged into the schedule's open debounce window, whose job runs for it),
    ``excluded`` (an exclusion calendar excludes it: ``error`` says ``calendar <name>``);
    of a cancelled run: ``cancel_previous`` while it ran, ``superseded`` before it started,
    ``cancelled`` by an operator, :meth:`rsched.Client.cancel` or ``rsched cancel``).
    ``schedule_id`` is None for an enqueued job. Times are aware UTC datetimes: the
    occurrence (``scheduled_at``), when its job was written (``fired_at``), when the attempt
    started and ended (None while unknown). ``error`` is the start of the message.
    ``priority`` is the job's level (``high``, ``normal``, ``low``; a record an older rsched
    wrote says ``normal``). ``labels`` are those the job was enqueued with (docs/labels.md).
    """

    execution_id: str
    status: str
    task: str
    queue: str
    schedule_id: str | None = None
    scheduled_at: datetime | None = None
    fired_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    attempt: int | None = None
    worker: str | None = None
    error_type: str | None = None
    error: str | None = None
    reason: str | None = None
    priority: str = "normal"
    labels: dict[str, str] = field(default_factory=dict, hash=False)

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data (datetimes in ISO 8601, absent fields and no labels
        left out)."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value is not None and value != {}:
                out[name] = value.isoformat() if isinstance(value, datetime) else value
        return out


def _num(value: str | None) -> int | None:
    """A stored whole number (ms, attempt) as a number, or None; no try/except: this runs for
    every job a worker finishes."""
    return int(value) if value and value.isdigit() else None


def run_record(
    fields: Mapping[str, str],
    *,
    queue: str,
    status: str,
    worker: str = "",
    duration_ms: float | None = None,
    error_type: str = "",
    error: str = "",
) -> str:
    """The record (a JSON array in RUN_FIELDS order, lua/includes/run_log.lua) of a job's entry
    ``fields`` that ended with ``status``: what the worker scripts append to the log, followed
    by a line of its labels when it has any (run_log.lua stores them in a field of their own).
    On the worker's path of every job: ~2 µs."""
    get = fields.get
    exec_id, sid, sched = get("execution_id", ""), get("schedule_id") or None, get("scheduled_at")
    at = _num(sched)
    fired = _num(get("fired_at"))
    attempt = _num(get("attempt"))
    row = [
        exec_id,
        EVENT_STATUS.get(status, status),
        get("task", ""),
        worker or None,
        None if duration_ms is None else round(duration_ms),
        fired if at is None or fired is None else fired - at,
        0 if attempt is None else None if attempt == 1 else attempt,
        None if queue == DEFAULT_QUEUE else queue,
        error_type or None,
        error[:ERROR_MAX] or None,
        # A scheduled run's execution id, <schedule id>@<scheduled ms>, names both; another
        # id that looks like one must not be read as one.
        None
        if exec_id == f"{sid}@{sched}" or (sid is None and at is None and "@" not in exec_id)
        else [sid, at],
    ]
    while row[-1] is None:
        row.pop()
    return orjson.dumps(row).decode() + (f"\n{labels}" if (labels := get("labels")) else "")


def run_index_keys(keys: Keys, run: str | None) -> list[str]:
    """The keys a script that logs the record ``run`` (run_record) declares for its label index
    (lua/includes/run_index.lua); none for a record without labels (one ``in`` on the worker's
    path of every job)."""
    if not run or "\n" not in run:
        return []
    return label_index_keys(keys, run.rpartition("\n")[2])


def label_index_keys(keys: Keys, *labels: str | None) -> list[str]:
    """The label index keys (lua/includes/run_index.lua) a script declares to index records
    carrying any of ``labels`` (stored texts "k=v,k=v"; None or '' for none): each pair's STREAM
    once, then the SET of pairs; none when none has labels, and none for labels rsched did not
    write (logged, not indexed)."""
    pairs: dict[str, None] = {}
    for text in labels:
        if text:
            try:
                pairs.update(dict.fromkeys([keys.run_label(p) for p in label_pairs(text)]))
            except ValueError:
                continue
    return [*pairs, keys.run_labels] if pairs else []


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _named(exec_id: object) -> tuple[str | None, int | None]:
    """The schedule id and scheduled ms a scheduled run's execution id names (<id>@<ms>)."""
    named, at, ms = exec_id.rpartition("@") if isinstance(exec_id, str) else ("", "", "")
    return (named, int(ms)) if at and ms.isdigit() else (None, None)


def _row(data: list[Any]) -> dict[str, Any]:
    """A stored array's values by name (an earlier version's twelve, or today's 1 to 11):
    defaults filled in, the schedule read from the execution id, times made absolute."""
    if len(data) == len(OLD_RUN_FIELDS):
        row = dict(zip(OLD_RUN_FIELDS, data, strict=True))
        if row["sid"] is None and row["sched"] is None:
            row["sid"], row["sched"] = _named(row["exec"])
        return row
    row = dict(zip(RUN_FIELDS, data + [None] * (len(RUN_FIELDS) - len(data)), strict=True))
    named = row.pop("named")
    sid, sched = named if isinstance(named, list) and len(named) == 2 else _named(row["exec"])
    row["sid"], row["sched"] = sid, sched
    fired = row["fired"]
    if _whole(fired) is not None and _whole(sched) is not None:  # ms after the occurrence
        row["fired"] = fired + sched
    attempt = row["attempt"]
    row["attempt"] = 1 if attempt is None else attempt or None  # null: the first; 0: none
    row["queue"] = row["queue"] or DEFAULT_QUEUE
    return row


def record_of(entry_id: str, fields: Mapping[str, str]) -> RunRecord | None:
    """A stored record (its entry id is when it ended or was dropped; a job of another level
    than normal names it in the field ``p``), or None when the entry is not one (someone else
    wrote it)."""
    try:
        data = orjson.loads(fields.get("r", ""))
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, list) or not 0 < len(data) <= len(OLD_RUN_FIELDS):
        return None
    row = _row(data)
    exec_id, sid, sched = _text(row["exec"]) or "", _text(row["sid"]), _whole(row["sched"])
    end = _int(entry_id.split("-", 1)[0])
    dur = _whole(row["dur"])
    status = _text(row["status"]) or ""
    # A skipped or cancelled run's record holds why in the error type's place.
    etype = _text(row["etype"])
    reason = etype if status in ("skipped", "cancelled") else None
    return RunRecord(
        execution_id=exec_id,
        status=status,
        task=_text(row["task"]) or "",
        queue=_text(row["queue"]) or "",
        schedule_id=sid,
        scheduled_at=_dt(sched),
        fired_at=_dt(_whole(row["fired"])),
        started_at=_dt(end - dur) if end is not None and dur is not None else None,
        ended_at=_dt(end),
        attempt=_whole(row["attempt"]),
        worker=_text(row["worker"]),
        error_type=None if reason else etype,
        error=_text(row["error"]),
        reason=reason,
        priority=fields.get("p") or "normal",
        labels=read_labels(fields.get("l")),
    )


@dataclass(frozen=True, slots=True)
class RunFilter:
    """What a read keeps: every given condition must hold."""

    status: str | None = None
    since_ms: int | None = None
    schedule_id: str | None = None
    task: str | None = None
    execution_id: str | None = None
    labels: frozenset[str] = frozenset()  # k=v pairs, every one carried

    def needles(self) -> tuple[str, ...]:
        """Texts that the ``r`` field of every record this filter keeps holds, in either layout
        (record_of): the server passes over the others (lua/runs_scan.lua). A value of
        characters a JSON encoder might escape gives none (keeps decides)."""
        texts = (
            (self.status, '"{}"'),
            (self.execution_id, '"{}"'),
            (self.schedule_id, '"{}'),  # "<id>@<ms>" (named by the execution id) or "<id>"
            (self.task, '"{}"'),
        )
        return tuple(form.format(v) for v, form in texts if v is not None and _PLAIN.match(v))

    def keeps(self, record: RunRecord) -> bool:
        return (
            (self.status is None or record.status == self.status)
            and (self.execution_id is None or record.execution_id == self.execution_id)
            and (self.schedule_id is None or record.schedule_id == self.schedule_id)
            and (self.task is None or record.task == self.task)
            and (not self.labels or self.labels <= {f"{k}={v}" for k, v in record.labels.items()})
        )


def check_cursor(cursor: str) -> None:
    """Raises ValueError unless ``cursor`` is one a page of runs returned."""
    if not _CURSOR.match(cursor):
        raise ValueError(f"{cursor!r} is not a cursor; pass the cursor a previous page returned")


async def read_runs(
    redis: Redis,
    keys: Keys,
    want: RunFilter,
    *,
    limit: int,
    cursor: str | None = None,
    scan_max: int = SCAN_MAX,
) -> Page[RunRecord]:
    """One page of runs, newest first: on the first page (no cursor) the runs in progress
    (newest fired first), then the log's records. Raises ValueError for a bad cursor."""
    out: list[RunRecord] = []
    if cursor is None and want.status in (None, *LIVE_STATUSES):
        live = [record for _, record in await live_runs(redis, keys, want)]
        if len(live) >= limit:
            return Page(live[:limit], "+" if want.status is None else None)
        out = live
    if want.status in LIVE_STATUSES:
        return Page(out, None)
    if cursor is not None:
        check_cursor(cursor)
    start = "+" if cursor in (None, "+") else f"({cursor}"
    found, stop = await log_records(
        redis, keys, want, limit=limit - len(out), start=start, scan_max=scan_max
    )
    return Page(out + [record for _, record in found], stop)


async def log_records(
    redis: Redis, keys: Keys, want: RunFilter, *, limit: int, start: str, scan_max: int
) -> tuple[list[tuple[str, RunRecord]], str | None]:
    """The log's records that ``want`` keeps, newest first from ``start`` (an XREVRANGE bound),
    with their entry ids: at most ``limit`` of them, looking at most ``scan_max`` records; and
    the id of the last record looked at when the log may hold more (None: it does not). With
    labels, the records come from the label index (indexed_records)."""
    if want.labels:
        return await indexed_records(redis, keys, want, limit=limit, start=start, scan_max=scan_max)
    low = "-" if want.since_ms is None else str(want.since_ms)
    try:
        return await scan_newest(
            redis, keys.runs, record_of, want.keeps, low=low, limit=limit, start=start,
            scan_max=scan_max, texts=want.needles(),
        )  # fmt: skip
    except ResponseError as exc:
        raise ValueError(f"{start.lstrip('(')!r} is not a cursor ({exc})") from None


async def scan_newest(
    redis: Redis,
    stream: str,
    parse: Callable[[str, Mapping[str, str]], R | None],
    keeps: Callable[[R], bool],
    *,
    low: str,
    limit: int,
    start: str,
    scan_max: int,
    texts: tuple[str, ...] = (),
) -> tuple[list[tuple[str, R]], str | None]:
    """The entries of a capped log (the runs log, the audit trail) that ``parse`` reads and
    ``keeps`` keeps, newest first from ``start`` down to ``low`` (XREVRANGE bounds), with their
    ids: at most ``limit``, looking at most ``scan_max`` entries; and the id of the last entry
    looked at when the log may hold more (None: it does not, or the key holds another type).
    With ``texts`` (the runs log: RunFilter.needles), the server passes over the entries whose
    record lacks any of them (lua/runs_scan.lua), so only those that may be kept travel."""
    caller = ScriptCaller(redis) if texts else None
    out: list[tuple[str, R]] = []
    scanned = 0
    while True:
        count = min(_CHUNK, scan_max - scanned)
        if caller is not None:
            reply = await caller.call_read("runs_scan", [stream], [start, low, count, *texts])
            looked, last = int(reply[0]), str(reply[1])
            page = [(e, _pairs(f)) for e, f in zip(reply[2::2], reply[3::2], strict=True)]
        else:
            try:
                page = cast(list[Entry], await redis.xrevrange(stream, start, low, count=count))
            except ResponseError as exc:
                if "WRONGTYPE" in str(exc):
                    return out, None
                raise
            looked, last = len(page), page[-1][0] if page else ""
        for entry_id, fields in page:
            record = parse(entry_id, fields)
            if record is not None and keeps(record):
                out.append((entry_id, record))
                if len(out) == limit:
                    return out, entry_id
        scanned += looked
        if looked < count:
            return out, None
        start = f"({last}"
        if scanned >= scan_max:
            return out, last


def _pairs(flat: list[str]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


async def indexed_records(
    redis: Redis, keys: Keys, want: RunFilter, *, limit: int, start: str, scan_max: int
) -> tuple[list[tuple[str, RunRecord]], str | None]:
    """log_records through the runs log's label index: the entry ids of the smallest index of
    ``want``'s pairs, newest first from ``start`` (XREVRANGE, a chunk at a time: the index's ids
    are the log's), then their records in one pipeline of XRANGE id id, kept by ``want`` (its
    other pairs, status, task...). An id whose record the log trimmed already is passed over.
    Looks at most ``scan_max`` ids."""
    try:
        index = [keys.run_label(pair) for pair in sorted(want.labels)]
    except ValueError:
        return [], None
    if len(index) > 1:
        async with redis.pipeline(transaction=False) as pipe:
            for key in index:
                pipe.xlen(key)
            sizes = await pipe.execute(raise_on_error=False)
        size = {key: n if isinstance(n, int) else 0 for key, n in zip(index, sizes, strict=True)}
        index.sort(key=size.__getitem__)
    low = "-" if want.since_ms is None else str(want.since_ms)
    out: list[tuple[str, RunRecord]] = []
    looked = 0
    while True:
        count = min(max(2 * (limit - len(out)), 64), _CHUNK, scan_max - looked)
        try:
            found = cast(list[Entry], await redis.xrevrange(index[0], start, low, count=count))
        except ResponseError as exc:
            if "WRONGTYPE" in str(exc):
                return out, None
            raise ValueError(f"{start.lstrip('(')!r} is not a cursor ({exc})") from None
        ids = [entry_id for entry_id, _ in found]
        looked += len(ids)
        async with redis.pipeline(transaction=False) as pipe:
            for entry_id in ids:
                pipe.xrange(keys.runs, entry_id, entry_id)
            replies = await pipe.execute(raise_on_error=False)
        for entry_id, reply in zip(ids, replies, strict=True):
            if isinstance(reply, BaseException) or not reply:
                continue  # trimmed from the log, not yet from its index
            record = record_of(entry_id, cast(list[Entry], reply)[0][1])
            if record is not None and want.keeps(record):
                out.append((entry_id, record))
                if len(out) == limit:
                    return out, entry_id
        if len(ids) < count:
            return out, None
        start = f"({ids[-1]}"
        if looked >= scan_max:
            return out, ids[-1]


async def live_runs(redis: Redis, keys: Keys, want: RunFilter) -> list[tuple[int, RunRecord]]:
    """Runs in progress: entries of every queue's streams (at most LIVE_MAX each), ``started``
    when a worker holds them (pending in the group), else ``fired``; newest fired first, each
    with the ms its entry was written."""
    queues = sorted(str(q) for q in await redis.smembers(keys.queues))
    streams = [(q, level, keys.queue(q, level)) for q in queues for level in PRIORITIES]
    low = "-" if want.since_ms is None else str(want.since_ms)
    async with redis.pipeline(transaction=False) as pipe:
        for _, _, stream in streams:
            pipe.xrange(stream, low, "+", count=LIVE_MAX)
            pipe.xpending_range(stream, GROUP, min="-", max="+", count=LIVE_MAX)
        replies = await pipe.execute(raise_on_error=False)
    out: list[tuple[int, RunRecord]] = []
    for i, (queue, level, _) in enumerate(streams):
        entries, pending = replies[2 * i], replies[2 * i + 1]
        if isinstance(entries, BaseException) or not entries:
            continue
        holders: dict[str, str] = {}
        if not isinstance(pending, BaseException):
            holders = {str(p["message_id"]): str(p["consumer"]) for p in pending}
        for entry_id, fields in cast(list[Entry], entries):
            worker = holders.get(entry_id)
            record = RunRecord(
                execution_id=fields.get("execution_id", ""),
                status="started" if worker is not None else "fired",
                task=fields.get("task", ""),
                queue=queue,
                schedule_id=fields.get("schedule_id") or None,
                scheduled_at=_dt(_int(fields.get("scheduled_at"))),
                fired_at=_dt(_int(fields.get("fired_at"))),
                attempt=_int(fields.get("attempt")),
                worker=worker,
                priority=level,
                labels=read_labels(fields.get("labels")),
            )
            if want.keeps(record):
                out.append((_int(entry_id.split("-", 1)[0]) or 0, record))
    out.sort(key=lambda pair: pair[0], reverse=True)
    return out


async def trim_runs(redis: Redis, keys: Keys, *, before_ms: int, max_entries: int) -> int:
    """Drop the records written before ``before_ms`` (XTRIM MINID: an entry id is its time) and
    those past about ``max_entries`` (MAXLEN ~), then the label index entries of every record
    the log no longer holds (trim_index); returns how many records were dropped."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.xtrim(keys.runs, minid=str(before_ms), approximate=False)
        pipe.xtrim(keys.runs, maxlen=max_entries, approximate=True)
        pipe.xrange(keys.runs, "-", "+", count=1)
        trimmed = await pipe.execute(raise_on_error=False)
    oldest = trimmed[2]
    if isinstance(oldest, list):
        await trim_index(redis, keys, oldest[0][0] if oldest else None)
    return sum(n for n in trimmed[:2] if isinstance(n, int))


async def trim_index(redis: Redis, keys: Keys, oldest: str | None) -> None:
    """Drop from each label index of the runs log (Keys.run_labels names their pairs) the
    entries older than the log's ``oldest`` record (None: the log is empty), whether the log
    lost them by age or by size (a writer's MAXLEN ~ included: XTRIM MINID, the index's ids
    being the log's); an index left empty is deleted and its pair leaves the set. A pipeline
    per 500 pairs: the cost follows the pairs in use, not the records."""
    cursor: int = 0
    while True:
        try:
            cursor, found = await redis.sscan(keys.run_labels, cursor, count=_CHUNK)
        except ResponseError:
            return  # another type: not rsched's
        pairs = [str(pair) for pair in found]
        indexes: list[str] = []
        for pair in pairs:
            try:
                indexes.append(keys.run_label(pair))
            except ValueError:
                indexes.append("")
        async with redis.pipeline(transaction=False) as pipe:
            for index in indexes:
                if index and oldest:
                    pipe.xtrim(index, minid=oldest, approximate=False)
                elif index:
                    pipe.xtrim(index, maxlen=0, approximate=False)
                if index:
                    pipe.xlen(index)
            replies = await pipe.execute(raise_on_error=False)
        left = iter(replies)
        gone = []
        for pair, index in zip(pairs, indexes, strict=True):
            if not index:
                gone.append(pair)
                continue
            next(left)
            if next(left) == 0:
                gone.append(pair)
        for pair in gone:
            await _drop_index(redis, keys, pair)
        if cursor == 0:
            return


async def _drop_index(redis: Redis, keys: Keys, pair: str) -> None:
    """Delete an empty label index (a stream left empty stays a key) and take its pair out of
    the set, unless a record was indexed meanwhile (WATCH: then the next sweep looks again)."""
    try:
        index = keys.run_label(pair)
    except ValueError:
        await redis.srem(keys.run_labels, pair)
        return
    async with redis.pipeline(transaction=True) as pipe:
        try:
            await pipe.watch(index)
            if await pipe.xlen(index) != 0:
                return
            pipe.multi()  # type: ignore[no-untyped-call]
            pipe.delete(index)
            pipe.srem(keys.run_labels, pair)
            await pipe.execute()
        except (WatchError, ResponseError):
            return
