"""A deployment's partitions seen as one: each partition's stores, the partition of a schedule
or a job, and reads gathered from every partition at once (docs/scaling.md, Partitions).

A read that spans the deployment makes one call per partition, all concurrently, and merges
their answers in the order of one partition's. Streams (dead letters, the runs log) are merged
newest first by entry id, and entries of two partitions with the same id by partition number
(higher first); a cursor names the last entry returned as ``<entry id>.<partition>`` (the entry
id alone with one partition, as before there were partitions), which gives every partition its
place to go on from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio
from redis.asyncio import Redis

from rsched._core.bulk import BulkItem, Problem
from rsched._core.errors import DeadLetterNotFound, InvalidSchedules, first_error
from rsched._core.job import DeadLetter
from rsched._core.keys import Keys
from rsched._core.page import Page
from rsched._core.partitions import job_partition, partition_of
from rsched._core.rules import PAGE_MAX, PRIORITIES
from rsched._core.settings import Settings
from rsched._core.workers import JobInfo, WorkerInfo
from rsched._redis.durability import Durability
from rsched._store.calendars import CalendarStore
from rsched._store.deployment import deployment_keys
from rsched._store.queues import QueueStore
from rsched._store.runs_log import (
    LIVE_STATUSES,
    SCAN_MAX,
    RunFilter,
    RunRecord,
    live_runs,
    log_records,
)
from rsched._store.schedules import BULK_IN_FLIGHT, ScheduleStore
from rsched._store.sources import SourceStore

T = TypeVar("T")

#: A place in the merged order of streams: (entry ms, entry sequence, partition).
Position = tuple[int, int, int]

_POSITION = re.compile(r"^(\d{1,20})-(\d{1,20})(?:\.(\d{1,3}))?$")


#: Calls of one fan-out in flight at once: each holds a connection of the client's pool.
IN_FLIGHT = 16
#: Records of the runs log a read looks at in each partition at least (SCAN_MAX is shared).
SCAN_MIN = 500


async def at_once(*works: Awaitable[Any]) -> list[Any]:
    """The results of ``works`` (reads of one partition), run concurrently so that their round
    trips overlap. A failure is raised as itself, not in an exception group: callers translate
    Redis errors as they would those of one read."""
    out: list[Any] = [None] * len(works)

    async def one(n: int, work: Awaitable[Any]) -> None:
        out[n] = await work

    try:
        async with anyio.create_task_group() as tg:
            for n, work in enumerate(works):
                tg.start_soon(one, n, work)
    except BaseExceptionGroup as group:
        raise first_error(group) from None
    return out


async def gather(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """The results of ``calls`` run concurrently (IN_FLIGHT at a time), in their order (a lone
    call runs as is)."""
    if len(calls) == 1:
        return [await calls[0]()]
    out: list[Any] = [None] * len(calls)
    limiter = anyio.CapacityLimiter(IN_FLIGHT)

    async def one(n: int) -> None:
        async with limiter:
            out[n] = await calls[n]()

    async with anyio.create_task_group() as tg:
        for n in range(len(calls)):
            tg.start_soon(one, n)
    return out


class Partitions:
    """The schedule, schedules file and queue stores of each partition of one deployment."""

    def __init__(self, redis: Redis, settings: Settings, keys: Keys) -> None:
        self.keys = keys
        self.count = keys.partitions
        every = keys.every_partition()
        self.schedules = tuple(ScheduleStore.from_settings(redis, settings, k) for k in every)
        self.queues = tuple(QueueStore.from_settings(redis, settings, k) for k in every)
        self.sources = tuple(SourceStore(redis, k) for k in every)
        # The deployment's calendars (keys of its own, not a partition's).
        self.calendars = CalendarStore(
            redis,
            keys,
            Durability.from_settings(settings),
            audit_cap=settings.retention.audit_max_entries,
        )

    @classmethod
    async def of(cls, redis: Redis, settings: Settings) -> Partitions:
        """The deployment's partitions (its number read, or stored when new: deployment_keys);
        raises PartitionMismatch when ``settings.partitions`` says another number."""
        return cls(redis, settings, await deployment_keys(redis, settings))

    def of_schedule(self, schedule_id: str) -> ScheduleStore:
        """The store of the schedule's partition."""
        return self.schedules[partition_of(schedule_id, self.count)]

    def sources_of(self, schedule_id: str) -> SourceStore:
        """The schedules files' store of the schedule's partition."""
        return self.sources[partition_of(schedule_id, self.count)]

    def of_job(self, execution_id: str) -> QueueStore:
        """The store of the job's partition (its schedule's for a fired occurrence)."""
        return self.queues[job_partition(execution_id, self.count)]

    async def each(self, call: Callable[[int], Awaitable[T]]) -> list[T]:
        """``call(k)`` for every partition k, concurrently; the results in partition order."""
        return await gather([functools.partial(call, k) for k in range(self.count)])

    async def queue_names(self) -> list[str]:
        """Every queue name of every partition, sorted."""
        names = await self.each(lambda k: self.queues[k].queue_names())
        return sorted({name for some in names for name in some})

    # --- positions in merged streams ------------------------------------------------------

    def encode(self, position: Position) -> str:
        """A stream cursor: the entry id, with ``.<partition>`` when there are several."""
        ms, seq, k = position
        return f"{ms}-{seq}" if self.count == 1 else f"{ms}-{seq}.{k}"

    def decode(self, cursor: str) -> Position:
        """The position a cursor (or a qualified entry id) names; an entry id without a
        partition names the entry of the last partition (so every partition looks at it).
        Raises ValueError."""
        found = _POSITION.match(cursor)
        k = int(found.group(3)) if found and found.group(3) is not None else self.count - 1
        if found is None or k >= self.count:
            raise ValueError(
                f"{cursor!r} is not a cursor; pass the cursor a previous page returned"
            )
        return int(found.group(1)), int(found.group(2)), k

    @staticmethod
    def start(position: Position | None, partition: int) -> str:
        """Where partition ``partition`` goes on, newest first, after ``position``: an
        XREVRANGE bound (inclusive for a lower partition, whose entry of the same id is next)."""
        if position is None:
            return "+"
        ms, seq, k = position
        return f"{ms}-{seq}" if partition < k else f"({ms}-{seq}"


def position(entry_id: str, partition: int) -> Position:
    """The place of a stream entry of ``partition`` in the merged order."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0), partition


@dataclass(frozen=True, slots=True)
class Part(Generic[T]):
    """What one partition's read of a stream found, newest first, and where it stopped: the
    position of the last entry it looked at when more may follow, None when it read to the end."""

    items: list[tuple[Position, T]]
    stop: Position | None


def merge_newest(
    parts: Sequence[Part[T]], limit: int
) -> tuple[list[tuple[Position, T]], Position | None]:
    """The newest ``limit`` items of every partition's read and the position to go on from
    (None at the end). Items older than where some partition stopped are left for the next
    page: that partition has not looked there yet."""
    stops = [p.stop for p in parts if p.stop is not None]
    floor = max(stops) if stops else None
    merged = sorted(
        (item for p in parts for item in p.items if floor is None or item[0] >= floor),
        key=lambda item: item[0],
        reverse=True,
    )
    if len(merged) > limit:
        return merged[:limit], merged[limit - 1][0]
    return merged, floor


# --- reads and writes across partitions ------------------------------------------------------


async def index_page(
    parts: Partitions, pos: tuple[float, str] | None, want: int
) -> tuple[list[tuple[str, float]], list[dict[str, str]]]:
    """The first ``want`` (id, score) entries after ``pos`` in the order of every partition's
    schedules index merged (score, then id: the order of one index), and each one's hash.

    One position serves every partition: ids are unique in the deployment, so (score, id)
    orders all schedules, and each partition finds its place after it (ScheduleStore.
    index_after). Each partition reads ``want`` entries, all at once: the first ``want`` of the
    merge are among them."""
    if parts.count == 1:
        store = parts.schedules[0]
        batch = await store.index_after(pos, want)
        return batch, await store.fields([sid for sid, _ in batch])
    batches = await parts.each(lambda k: parts.schedules[k].index_after(pos, want))
    merged = sorted(((score, sid, k) for k, batch in enumerate(batches) for sid, score in batch))[
        :want
    ]
    ids: dict[int, list[str]] = {}
    for _, sid, k in merged:
        ids.setdefault(k, []).append(sid)
    found = await gather(
        [functools.partial(parts.schedules[k].fields, some) for k, some in ids.items()]
    )
    hashes = {sid: h for some, got in zip(ids.values(), found, strict=True)
              for sid, h in zip(some, got, strict=True)}  # fmt: skip
    return [(sid, score) for score, sid, _ in merged], [hashes[sid] for _, sid, _ in merged]


async def gather_fields(parts: Partitions, schedule_ids: Sequence[str]) -> list[dict[str, str]]:
    """The stored hash of each id, with its next run ({} where it does not exist), every
    partition's ids read at once (ScheduleStore.fields)."""
    ids: dict[int, list[str]] = {}
    for sid in schedule_ids:
        ids.setdefault(partition_of(sid, parts.count), []).append(sid)
    found = await gather(
        [functools.partial(parts.schedules[k].fields, some) for k, some in ids.items()]
    )
    hashes = {sid: h for some, got in zip(ids.values(), found, strict=True)
              for sid, h in zip(some, got, strict=True)}  # fmt: skip
    return [hashes[sid] for sid in schedule_ids]


async def select_ids(
    parts: Partitions,
    pairs: Sequence[str] = (),
    *,
    task: str | None = None,
    queue: str | None = None,
) -> list[str]:
    """The ids of the schedules that carry every label ``k=v`` of ``pairs`` and have ``task``
    and ``queue`` when given, sorted; every partition at once. Labels are looked up in the label
    index (one SINTER a partition); ``task`` and ``queue`` are read from the hashes of those, or
    with no label of every schedule (lua/plan_fields.lua, BULK_READ hashes a call: ~0.3 s at
    100k schedules, bench/labels.py): no index, so a schedule costs no more memory for them."""

    async def one(k: int) -> list[str]:
        store = parts.schedules[k]
        ids = sorted(await store.label_ids(pairs)) if pairs else await store.every_id()
        if task is None and queue is None:
            return ids
        found = await store.some_fields(ids, ["task", "queue"])
        return [
            sid
            for sid, got in zip(ids, found, strict=True)
            if got
            and (task is None or got.get("task") == task)
            and (queue is None or got.get("queue", "default") == queue)
        ]

    return sorted(sid for some in await parts.each(one) for sid in some)


async def save_many(
    parts: Partitions,
    items: Sequence[BulkItem],
    *,
    upsert: bool,
    problems: Sequence[Problem] = (),
    total: int | None = None,
) -> dict[str, str]:
    """Check every item against Redis, then write them all; returns each id's outcome.

    The checks first, for the items of every partition at once (one read per BULK_READ ids and
    partition): an id that exists (mode ``add``) or does not (``replace``), an ``at`` or
    ``end_at`` in the past. When any fails, or ``problems`` (found by the caller) is not empty,
    InvalidSchedules lists them all (out of ``total`` entries) and nothing is written in any
    partition. Then each partition's items are written, all partitions at once and at most
    BULK_IN_FLIGHT script calls in all, each schedule atomic alone. With ``upsert`` an item
    whose stored spec and pause state already match is not written (outcome ``unchanged``).

    Outcomes: created, replaced, unchanged; for a write that lost a race with another writer
    after the check, exists (mode add), not_found (replace) or conflict (``expect_gen`` moved).
    Raises StateError for a key of the wrong type (a writer other than rsched): before anything
    is written when the check finds it.
    """
    groups: dict[int, list[BulkItem]] = {}
    for item in items:
        groups.setdefault(partition_of(item.schedule_id, parts.count), []).append(item)
    checked = await gather(
        [
            functools.partial(parts.schedules[k].check_many, group, skip_unchanged=upsert)
            for k, group in groups.items()
        ]
    )
    found = sorted([*problems, *(p for c in checked for p in c.problems)], key=lambda p: p[0])
    if found:
        raise InvalidSchedules(found, len(items) if total is None else total)
    # The writes of every partition share the in-flight bound of one bulk write.
    limiter = anyio.CapacityLimiter(BULK_IN_FLIGHT)
    written = await gather(
        [
            functools.partial(parts.schedules[k].write_many, c, limiter)
            for k, c in zip(groups, checked, strict=True)
        ]
    )
    outcomes = {sid: got for some in written for sid, got in some.items()}
    return {item.schedule_id: outcomes[item.schedule_id] for item in items}


def merge_queue_stats(
    parts: Sequence[dict[str, dict[str, int | float | None]]],
) -> dict[str, dict[str, Any]]:
    """QueueStore.queue_stats of every partition as one: counts summed, the consumers of the
    partition with most (a worker reads every partition) and the oldest pending age."""
    out: dict[str, dict[str, Any]] = {}
    for part in parts:
        for name, q in part.items():
            into = out.get(name)
            if into is None:
                out[name] = dict(q)
                continue
            for field, value in q.items():
                if field == "consumers":
                    into[field] = max(into[field] or 0, value or 0)
                elif field == "oldest_pending_ms":
                    ages = [a for a in (into[field], value) if a is not None]
                    into[field] = max(ages) if ages else None
                else:
                    into[field] = (into[field] or 0) + (value or 0)
    return dict(sorted(out.items()))


async def jobs_across(
    parts: Partitions,
    queues: Sequence[str],
    states: Sequence[str],
    limit: int,
    skip: int,
    workers: Sequence[WorkerInfo] | None = None,
) -> tuple[list[JobInfo], bool]:
    """QueueStore.jobs over the partitions: each reads as many as the page needs, and the
    merge keeps the order of one partition's (queue by queue; running, then queued by level
    and entry, then delayed by due time)."""
    want = skip + limit + 1
    found = await parts.each(lambda k: parts.queues[k].jobs(queues, states, want, 0, workers))
    order = {q: n for n, q in enumerate(queues)}
    levels: dict[str, int] = {level: n for n, level in enumerate(PRIORITIES)}
    states_order = {"running": 0, "queued": 1, "delayed": 2}

    def key(job: JobInfo) -> tuple[Any, ...]:
        entry = position(job.entry_id, 0)[:2] if job.entry_id else (0, 0)
        due = job.due_at.timestamp() if job.due_at else 0.0
        return (order.get(job.queue or "", 0), states_order.get(job.state, 3),
                levels.get(job.priority, 0), due, entry)  # fmt: skip

    merged = sorted((job for jobs, _ in found for job in jobs), key=key)
    more = len(merged) > skip + limit or any(m for _, m in found)
    return merged[skip : skip + limit], more


async def runs_across(
    parts: Partitions, want: RunFilter, *, limit: int, cursor: str | None
) -> Page[RunRecord]:
    """Client.runs over the partitions: the runs in progress of every partition first (first
    page), then the logs merged by entry id; each log looks at its share of SCAN_MAX records."""
    out: list[RunRecord] = []
    redis = parts.schedules[0].redis
    if cursor is None and want.status in (None, *LIVE_STATUSES):
        found = await parts.each(lambda k: live_runs(redis, parts.keys.for_partition(k), want))
        live = [r for _, r in sorted((p for some in found for p in some), key=lambda p: -p[0])]
        if len(live) >= limit:
            return Page(live[:limit], "+" if want.status is None else None)
        out = live
    if want.status in LIVE_STATUSES:
        return Page(out, None)
    at = None if cursor in (None, "+") else parts.decode(cursor)
    scan_max = max(SCAN_MAX // parts.count, SCAN_MIN)

    async def one(k: int) -> Part[RunRecord]:
        got, stop = await log_records(
            redis,
            parts.keys.for_partition(k),
            want,
            limit=limit - len(out),
            start=parts.start(at, k),
            scan_max=scan_max,
        )
        items = [(position(eid, k), record) for eid, record in got]
        return Part(items, None if stop is None else position(stop, k))

    page, nxt = merge_newest(await parts.each(one), limit - len(out))
    return Page(out + [r for _, r in page], None if nxt is None else parts.encode(nxt))


async def dead_letters_across(
    parts: Partitions, queue: str, *, limit: int, cursor: str | None, task: str | None
) -> Page[DeadLetter]:
    """Client.dead_letters over the partitions, newest first; entry ids name their partition
    (``<entry id>.<partition>``). Raises ValueError for a bad cursor."""
    at = parts.decode(cursor) if cursor else None
    peek = min(limit + 1, PAGE_MAX)

    async def one(k: int) -> Part[DeadLetter]:
        bound = parts.start(at, k)  # "+", "<id>" or "(<id>"
        letters, nxt = await parts.queues[k].dead_letters(
            queue, limit=peek, cursor=bound.lstrip("(") if at else None, task=task,
            inclusive=not bound.startswith("("),
        )  # fmt: skip
        items = [(position(d.entry_id, k), d) for d in letters]
        stop = items[-1][0] if nxt is not None and items else None
        return Part(items, stop)

    page, nxt = merge_newest(await parts.each(one), limit)
    letters = [dataclasses.replace(d, entry_id=parts.encode(p)) for p, d in page]
    return Page(letters, None if nxt is None else parts.encode(nxt))


def entry_ids_of(
    parts: Partitions, partition: int, entry_ids: Sequence[str] | None
) -> list[str] | None:
    """Of dead-letter ids given to requeue or purge, those of one partition as its stream
    knows them (an id without a partition is looked for in every one); None stays None (all)."""
    if entry_ids is None or parts.count == 1:
        return None if entry_ids is None else list(entry_ids)
    out = []
    for entry_id in entry_ids:
        bare, _, k = entry_id.partition(".")
        if not k or k == str(partition):
            out.append(bare)
    return out


async def dead_letter_across(parts: Partitions, queue: str, entry_id: str) -> DeadLetter:
    """One dead letter by its id (``<entry id>.<partition>``; an id without a partition is
    looked for in every one). Raises DeadLetterNotFound."""
    if parts.count == 1:
        return await parts.queues[0].dead_letter(queue, entry_id)
    bare, _, k = entry_id.partition(".")
    candidates = [int(k)] if k.isdigit() and int(k) < parts.count else []
    if not k:
        candidates = list(range(parts.count))
    for n in candidates:
        with contextlib.suppress(DeadLetterNotFound):
            letter = await parts.queues[n].dead_letter(queue, bare)
            return dataclasses.replace(letter, entry_id=f"{bare}.{n}")
    raise DeadLetterNotFound(queue, entry_id)
