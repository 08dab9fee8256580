"""Redis access for schedules: their writes, and the reads the client and the scheduler share
(return codes mapped by rsched._core.codes).

The client SDK writes and reads schedules through this module, the scheduler and its retention
sweep read through it too, so a key layout or script signature lives in exactly one place on the
Python side. What only the leading scheduler calls is in rsched._store.firing (due entries,
fires) and rsched._store.leases; a schedules file's bookkeeping in rsched._store.sources.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import orjson
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rsched._core.audit import SpecVersion, current_author, spec_version
from rsched._core.bulk import SPEC_KEYS, BulkItem, Problem
from rsched._core.codes import Code, check, wrong_type
from rsched._core.errors import (
    InvalidSchedule,
    ScheduleExists,
    ScheduleNotFound,
    StateError,
    WriteNotReplicated,
    first_error,
)
from rsched._core.history import stored_events
from rsched._core.keys import Keys, parked_bucket
from rsched._core.rules import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    NAME_RE,
    PRIORITIES,
    Priority,
    encode_payload,
    label_pairs,
)
from rsched._core.schedule import Schedule
from rsched._core.settings import DEFAULT_HISTORY_LIMIT, Settings
from rsched._core.timing import first_run_ms
from rsched._core.words import words
from rsched._redis import scripts
from rsched._redis.durability import Durability
from rsched._store import parking
from rsched._store.calendars import CalendarStore
from rsched._store.runs_log import label_index_keys


@dataclass(frozen=True, slots=True)
class IndexStats:
    """What the schedules index and the lease say about a deployment (see Client.stats)."""

    total: int
    active: int
    paused: int
    due: int
    oldest: tuple[str, int] | None  # the most overdue schedule and its next run (ms)
    leader: str | None  # the lease value "<token>:<owner>"
    lease_left_ms: int
    lease_ttl_ms: int | None = None  # the TTL the leader uses (None: an older scheduler)


@dataclass(frozen=True, slots=True)
class DueSummary:
    """What is due in a partition now (ScheduleStore.due_summary)."""

    due: int
    oldest_ms: int | None  # the next run of the most overdue schedule
    late: int  # due at or before the "late" bound


#: Ids read per call of the bulk check, and schedules written per upsert_many.lua call (a call
#: blocks the server: ~10 ms at 1,000; docs/results.md), BULK_IN_FLIGHT calls at once.
BULK_READ = 5_000
#: Whole hashes read per call of lua/read_hashes.lua (a page of ``list`` is at most 1,000).
READ_HASHES = 1_000
BULK_WRITE = 1_000
BULK_IN_FLIGHT = 3
#: Large payloads end a call sooner: a call never carries much more than this many bytes.
BULK_WRITE_BYTES = 1_000_000
# What a bulk write's item lost a race to (another writer came between check and write).
_RACES = {
    Code.EXISTS: "exists",
    Code.NOT_FOUND: "not_found",
    Code.CONFLICT: "conflict",
    Code.LABELS_MOVED: "conflict",  # its labels changed between the check and the write
}
#: Times a write reads a schedule's labels again when they changed under it (LABELS_MOVED).
LABEL_ATTEMPTS = 5


@dataclass(slots=True)
class Checked:
    """What the checks of a bulk write found (ScheduleStore.check_many): the items, those to
    send with their first run, the outcomes known already (unchanged) and the problems."""

    items: Sequence[BulkItem]
    now: int  # the Redis time the first runs were computed at (ms)
    sends: list[tuple[BulkItem, int | None]] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # id -> its stored labels, when any


class ScheduleStore(scripts.ScriptCaller):
    """Schedule writes and reads for one Redis client and one partition's keys."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        super().__init__(redis)
        self.keys = keys
        self.history_limit = history_limit
        self.max_payload_bytes = max_payload_bytes
        # Writes put a schedule due later than this from now in its parked bucket (None: never;
        # scheduler.park off), as the leader would park it (rsched._store.parking).
        self.park_after_ms: int | None = parking.PARK_AFTER_MS
        # The audit trail's cap (MAXLEN ~) and the specs kept per schedule (docs/audit.md).
        self.audit_cap = 100_000
        self.spec_keep = 20

    @classmethod
    def from_settings(
        cls, redis: Redis, settings: Settings, keys: Keys | None = None
    ) -> ScheduleStore:
        """The store for one deployment's limits and one partition's keys (the only partition
        when ``keys`` is not given)."""
        store = cls(
            redis,
            keys or Keys(settings.prefix),
            history_limit=settings.history_limit,
            max_payload_bytes=settings.max_payload_bytes,
        )
        store.durability = Durability.from_settings(settings)
        store.audit_cap = settings.retention.audit_max_entries
        store.spec_keep = settings.spec_history_limit
        if not settings.scheduler.park:
            store.park_after_ms = None
        return store

    # --- schedule writes -------------------------------------------------------------------

    def audit_arg(self, action: str | None = None) -> str:
        """The audit argument of a write's script: the author of the call being made
        (rsched._core.audit.current_author), ``action`` when the caller names it."""
        return current_author().arg(action, self.audit_cap, self.spec_keep)

    async def save(
        self,
        schedule: Schedule,
        *,
        mode: str = "upsert",
        expect_gen: int | None = None,
        action: str | None = None,
    ) -> tuple[int, bool]:
        """Validate ``schedule`` against Redis time and write it; returns (generation, created).

        ``mode``: ``add`` (ScheduleExists if the id is taken), ``upsert``, or ``replace``
        (ScheduleNotFound if it is not). The first run is computed from Redis TIME with
        :func:`first_run_ms`; an ``every`` interval keeps the grid of the stored schedule it
        replaces. Raises InvalidSchedule (nothing written) for a payload over the size limit,
        an ``at`` or ``end_at`` in the past, or a window without occurrences; StateError when
        the schedule's key holds something rsched did not write; Conflict when ``expect_gen``
        does not match.
        """
        try:
            encode_payload(schedule.payload, self.max_payload_bytes)
        except ValueError as exc:
            raise InvalidSchedule(schedule.id, [("payload", str(exc))]) from None
        try:
            version, labels = await self.redis.hmget(
                self.keys.schedule(schedule.id), ["version", "labels"]
            )
        except ResponseError as exc:
            raise wrong_type(schedule_id=schedule.id) from exc
        exists = version is not None
        created = split_version(str(version or ""))[1]
        missing = await self._calendars_missing([schedule.exclude])
        if missing:
            raise InvalidSchedule(schedule.id, [no_calendar(sorted(missing))])
        if mode == "add" and exists:
            raise ScheduleExists(schedule.id)
        if mode == "replace" and not exists:
            raise ScheduleNotFound(schedule.id)
        now = await self.time_ms()
        anchor = int(created) if exists and created else now
        next_ms = first_run_ms(schedule, now, created_ms=anchor, creating=not exists)
        return await self.write(
            schedule,
            mode=mode,
            expect_gen=expect_gen,
            next_ms=next_ms,
            created_ms=now,
            action=action,
            labels=str(labels or ""),
        )

    async def write(
        self,
        schedule: Schedule,
        *,
        mode: str,
        expect_gen: int | None,
        next_ms: int | None,
        created_ms: int,
        action: str | None = None,
        labels: str = "",
    ) -> tuple[int, bool]:
        """Run upsert.lua; returns (generation, created). Raises on exists/not found/conflict.
        ``action`` names the change in the audit trail (None: add, upsert or update by
        ``mode``). ``labels`` is the schedule's stored labels field as read ('' none); when
        another writer changed them meanwhile, they are read again (up to LABEL_ATTEMPTS
        times)."""
        k = self.keys
        spec = schedule.spec_fields()
        if schedule.paused and schedule.pause_note:
            spec["pause_note"] = schedule.pause_note
        flat = [v for pair in spec.items() for v in pair]
        new_keys = k.labels(label_pairs(spec.get("labels", "")))
        for _ in range(LABEL_ATTEMPTS):
            old_keys = stored_label_keys(k, schedule.id, labels)
            res = await self._upsert(schedule, mode, expect_gen, next_ms, created_ms, flat,
                                     (labels, old_keys, new_keys), action)  # fmt: skip
            if res[0] != Code.LABELS_MOVED:
                break
            labels = str(await self.redis.hget(k.schedule(schedule.id), "labels") or "")
        check(res, script="upsert", schedule_id=schedule.id)
        return int(res[1]), bool(int(res[2]))

    async def _upsert(
        self,
        schedule: Schedule,
        mode: str,
        expect_gen: int | None,
        next_ms: int | None,
        created_ms: int,
        flat: list[str],
        labels: tuple[str, list[str], list[str]],
        action: str | None,
    ) -> Any:
        k = self.keys
        stored, old_keys, new_keys = labels
        op_key, op_id = k.new_op()
        return await self.call(
            "upsert",
            [
                k.schedules,
                k.schedule(schedule.id),
                k.pending(schedule.id),
                k.queues,
                op_key,
                k.parked_of(schedule.id),
                k.parked,
                k.audit,
                k.specs(schedule.id),
                *old_keys,
                *new_keys,
            ],
            [
                schedule.id,
                mode,
                "" if expect_gen is None else str(expect_gen),
                "" if next_ms is None else str(next_ms),
                "1" if schedule.paused else "0",
                schedule.queue,
                k.wake,
                op_id,
                created_ms,
                self._park_after_arg(),
                self.audit_arg(action),
                stored,
                len(old_keys),
                len(new_keys),
                *flat,
            ],
        )

    def _park_after_arg(self) -> str:
        return "" if self.park_after_ms is None else str(self.park_after_ms)

    async def check_many(
        self, items: Sequence[BulkItem], *, skip_unchanged: bool = False
    ) -> Checked:
        """The checks of a bulk write (rsched._store.partitions.save_many), nothing written: what
        to send, the unchanged items and the problems found, at the Redis time read after the
        stored specs. Raises StateError for a key of the wrong type."""
        # Only the existence matters unless unchanged specs are to be recognised.
        stored = await self._read_specs([item.schedule_id for item in items], skip_unchanged)
        missing = await self._calendars_missing([item.timing.exclude for item in items])
        now = await self.time_ms()
        first_runs: dict[tuple[int, int | None, bool, str], int | InvalidSchedule | None] = {}
        checked = Checked(items, now)
        if None in stored:
            raise _wrong_types(
                [i.schedule_id for i, f in zip(items, stored, strict=True) if f is None]
            )
        for item, found in zip(items, stored, strict=True):
            assert found is not None
            sid = item.schedule_id
            exists = bool(found)
            if found.get("labels"):
                checked.labels[sid] = found["labels"]
            if item.mode == "add" and exists:
                checked.problems.append(
                    (item.index, sid, "id", "already exists; use upsert_many() to replace it")
                )
                continue
            if item.mode == "replace" and not exists:
                checked.problems.append((item.index, sid, "id", "does not exist"))
                continue
            if missing and (lacking := [c for c in item.timing.exclude if c in missing]):
                checked.problems.append((item.index, sid, *no_calendar(lacking)))
                continue
            if skip_unchanged and exists and _unchanged(found, item):
                checked.outcomes[sid] = "unchanged"
                continue
            created = split_version(found.get("version", ""))[1] if exists else ""
            # An ``every`` without start_at keeps the grid of the schedule it replaces.
            timing = item.timing
            anchor = int(created) if created and timing.every is not None else None
            # A jitter's delay is the schedule's own: its first run is too.
            key = (id(timing), anchor, exists, sid if timing.jitter is not None else "")
            if key not in first_runs:
                try:
                    first_runs[key] = first_run_ms(
                        timing,
                        now,
                        created_ms=anchor if anchor is not None else now,
                        creating=not exists,
                        schedule_id=sid,
                    )
                except InvalidSchedule as exc:
                    first_runs[key] = exc
            got = first_runs[key]
            if isinstance(got, InvalidSchedule):
                checked.problems.extend((item.index, sid, f, m) for f, m in got.errors)
                continue
            checked.sends.append((item, got))
        return checked

    async def _calendars_missing(self, excludes: Sequence[tuple[str, ...]]) -> set[str]:
        """The calendars named in ``excludes`` that do not exist (one read for all)."""
        names = sorted({name for names in excludes for name in names})
        return set(await CalendarStore(self.redis, self.keys).missing(names)) if names else set()

    async def write_many(
        self, checked: Checked, limiter: anyio.CapacityLimiter | None = None
    ) -> dict[str, str]:
        """Write what :meth:`check_many` found to send: upsert_many.lua, up to BULK_WRITE items
        (BULK_WRITE_BYTES of spec) a call, at most BULK_IN_FLIGHT calls at once (or as
        ``limiter`` allows); returns each item's outcome (rsched._store.partitions.save_many)."""
        outcomes, now = dict(checked.outcomes), checked.now
        # Each call takes the items of a few parked buckets (the script adds a call's parked
        # schedules one ZADD a bucket), in the order given within it (its audit record's).
        by_bucket = sorted(checked.sends, key=lambda send: parked_bucket(send[0].schedule_id))
        chunks = [sorted(chunk, key=lambda send: send[0].index) for chunk in _chunks(by_bucket)]
        sends = [send for chunk in chunks for send in chunk]
        replies: list[list[str]] = [[] for _ in chunks]

        async def send(n: int, chunk: Sequence[tuple[BulkItem, int | None]]) -> None:
            async with bound:
                try:
                    replies[n] = await self._write_chunk(chunk, now, cache, checked.labels)
                except WriteNotReplicated as exc:  # written: the other calls go on
                    unconfirmed.append(exc)

        # The items' field names and most values repeat: pack each once per call.
        cache: dict[str, bytes] = {}
        bound = limiter or anyio.CapacityLimiter(BULK_IN_FLIGHT)
        unconfirmed: list[WriteNotReplicated] = []
        try:
            async with anyio.create_task_group() as tg:
                for n, chunk in enumerate(chunks):
                    tg.start_soon(send, n, chunk)
        except BaseExceptionGroup as group:
            # A chunk's failure (a lost connection, a user the ACL refuses) is the call's: raise
            # it as such, so that callers translate it as they do any other Redis error.
            raise first_error(group) from None
        if unconfirmed:
            raise unconfirmed[0]
        wrong: list[str] = []
        for (item, _), reply in zip(sends, (r for chunk in replies for r in chunk), strict=True):
            code, _, rest = reply.partition(":")
            if int(code) == Code.OK:
                outcome = "created" if rest.endswith(":1") else "replaced"
            elif int(code) == Code.WRONG_TYPE:
                wrong.append(item.schedule_id)
                continue
            else:
                outcome = _RACES[Code(int(code))]
            outcomes[item.schedule_id] = outcome
        if wrong:
            raise _wrong_types(wrong, written=True)
        return {item.schedule_id: outcomes[item.schedule_id] for item in checked.items}

    async def _read_specs(
        self, schedule_ids: Sequence[str], spec: bool
    ) -> list[dict[str, str] | None]:
        """The version of each id (with ``spec``, also its status and spec fields): {} when
        absent, None when the key holds another type."""
        names = ["version", "status", *SPEC_KEYS] if spec else ["version", "labels"]
        out: list[dict[str, str] | None] = []
        for start in range(0, len(schedule_ids), BULK_READ):
            chunk = schedule_ids[start : start + BULK_READ]
            keys = [self.keys.schedule(s) for s in chunk]
            # A bulk create's ids are all new: one EXISTS over the chunk says so.
            if not await self.redis.exists(*keys):
                out += ({} for _ in chunk)
                continue
            out += unpack_fields(await self.call_packed("plan_fields", keys, names), names)
        return out

    async def _write_chunk(
        self,
        chunk: Sequence[tuple[BulkItem, int | None]],
        created_ms: int,
        cache: dict[str, bytes],
        labels: dict[str, str],
    ) -> list[str]:
        """One upsert_many.lua call; its reply per item (see the script's header)."""
        k = self.keys
        op_key, op_id = k.new_op()
        keys = [k.schedules, k.queues, op_key, k.parked, k.audit]
        # A schedules file's writes are its sync, whatever each one's mode.
        action = "sync" if current_author().source.startswith("sync:") else None
        args = [k.wake, op_id, str(created_ms), self._park_after_arg(), self.audit_arg(action)]
        for item, next_ms in chunk:
            sid = item.schedule_id
            stored = labels.get(sid, "")
            old_keys = stored_label_keys(k, sid, stored) if stored else []
            new_keys = k.labels(label_pairs(item.spec["labels"])) if "labels" in item.spec else []
            keys += (k.schedule(sid), k.pending(sid), k.parked_of(sid), k.specs(sid))
            keys += (*old_keys, *new_keys)
            args += (
                item.schedule_id,
                item.mode,
                "" if item.expect_gen is None else str(item.expect_gen),
                "" if next_ms is None else str(next_ms),
                "1" if item.paused else "0",
                item.queue,
                stored,
                str(len(old_keys)),
                str(len(new_keys)),
                str(2 * len(item.spec)),
            )
            for pair in item.spec.items():
                args += pair
        reply = str(await self.call_packed("upsert_many", keys, args, cache))
        replies = reply.split(",")
        if len(replies) != len(chunk):  # a lone code about the whole call
            check(int(reply), script="upsert_many")
            raise AssertionError(f"upsert_many answered {reply!r} for {len(chunk)} items")
        return replies

    async def remove(self, schedule_id: str) -> None:
        """Delete a schedule, its history, its backfill record and its id in its schedules
        file's index; raises ScheduleNotFound."""
        k = self.keys
        # Its id leaves its schedules file's index too (rsched._store.sources).
        source, labels = await self.redis.hmget(k.schedule(schedule_id), ["source", "labels"])
        for _ in range(LABEL_ATTEMPTS):
            op_key, op_id = k.new_op()
            res = await self.call(
                "remove",
                [
                    k.schedules,
                    k.schedule(schedule_id),
                    k.history(schedule_id),
                    k.pending(schedule_id),
                    op_key,
                    k.parked_of(schedule_id),
                    k.parked,
                    k.backfilled(schedule_id),
                    k.audit,
                    k.specs(schedule_id),
                    *stored_label_keys(k, schedule_id, str(labels or "")),
                ],
                [schedule_id, op_id, self.audit_arg(), str(labels or "")],
            )
            if res[0] != Code.LABELS_MOVED:
                break
            labels = await self.redis.hget(k.schedule(schedule_id), "labels")
        check(res, script="remove", schedule_id=schedule_id)
        if source:
            await self.redis.srem(k.source(str(source)), schedule_id)

    async def pause(self, schedule_id: str, note: str | None) -> None:
        k = self.keys
        op_key, op_id = k.new_op()
        res = await self.call(
            "pause",
            [
                k.schedules,
                k.schedule(schedule_id),
                op_key,
                k.parked_of(schedule_id),
                k.parked,
                k.audit,
            ],
            [schedule_id, note or "", op_id, self._park_after_arg(), self.audit_arg()],
        )
        check(res, script="pause", schedule_id=schedule_id)

    async def resume(self, schedule_id: str, expect_gen: int, next_ms: int | None) -> None:
        k = self.keys
        op_key, op_id = k.new_op()
        res = await self.call(
            "resume",
            [
                k.schedules,
                k.schedule(schedule_id),
                op_key,
                k.parked_of(schedule_id),
                k.parked,
                k.audit,
            ],
            [
                schedule_id,
                expect_gen,
                "" if next_ms is None else next_ms,
                k.wake,
                op_id,
                self.audit_arg(),
            ],
        )
        check(res, script="resume", schedule_id=schedule_id)

    async def trigger(
        self,
        schedule_id: str,
        queue: str | None = None,
        *,
        traced: Callable[[str], str] | None = None,
    ) -> tuple[Code, str]:
        """Run one extra occurrence now; returns (code, execution id): FIRED, SKIPPED, BUFFERED or
        DEBOUNCED (merged into the open debounce window, whose execution id it returns).
        ``queue`` is the schedule's (read from its hash when not given); the job goes to the
        stream of the schedule's priority (to the queue's delayed set first with a debounce).
        ``traced`` (a client that traces) is told the queue and returns the W3C traceparent the
        job carries."""
        if not NAME_RE.match(schedule_id):
            raise ScheduleNotFound(schedule_id)  # rsched never created it (the script needs one)
        k = self.keys
        stored_queue, stored_priority, labels = await self.redis.hmget(
            k.schedule(schedule_id), ["queue", "priority", "labels"]
        )
        if queue is None:
            queue = str(stored_queue or "default")
        level: Priority = stored_priority if stored_priority in PRIORITIES else "normal"
        op_key, op_id = k.new_op()
        res = await self.call(
            "trigger",
            [
                k.schedules,
                k.schedule(schedule_id),
                k.history(schedule_id),
                k.pending(schedule_id),
                k.queue(queue, level),
                op_key,
                k.backlogs,
                k.parked_of(schedule_id),
                k.parked,
                k.runs,
                k.delayed_queue(queue),
                k.audit,
                k.activity,
                # Where a skipped trigger's record is indexed by the schedule's labels.
                *label_index_keys(k, str(labels or "")),
            ],
            [schedule_id, self.history_limit, k.cancel, op_id, self.audit_arg()]
            + ([traced(queue)] if traced is not None else []),
        )
        code = check(res, script="trigger", schedule_id=schedule_id)
        return code, str(res[1])

    async def backfill(
        self, schedule: Schedule, times: Sequence[int], traceparent: str = ""
    ) -> list[Code]:
        """Fire past occurrences of the schedule as of its ``generation``; a code per time
        (FIRED, BUFFERED to run after the schedule's unfinished run, DEBOUNCED merged into its
        debounce window, or STALE when fired before). ``traceparent`` (a client that traces):
        the W3C traceparent its jobs carry. Raises ScheduleNotFound, Conflict when the
        generation moved, InvalidArgument (``end``) for a time in the future by Redis TIME."""
        k, sid = self.keys, schedule.id
        op_key, op_id = k.new_op()
        res = await self.call(
            "backfill",
            [
                k.schedule(sid),
                k.history(sid),
                k.pending(sid),
                k.queue(schedule.queue, schedule.priority),
                k.backfilled(sid),
                op_key,
                k.backlogs,
                k.delayed_queue(schedule.queue),
                k.audit,
            ],
            [
                sid,
                schedule.generation,
                self.history_limit,
                k.cancel,
                op_id,
                self.audit_arg(),
                traceparent,
                *times,
            ],
        )
        check(res, script="backfill", schedule_id=sid, field="end")
        return [Code(int(c)) for c in res[1:]]

    # --- reads -----------------------------------------------------------------------------

    async def fields(self, schedule_ids: Sequence[str]) -> list[dict[str, str]]:
        """The stored hash of each id (empty dict where it does not exist), in one round trip.

        Raises StateError when one of the keys is not a hash.
        """
        out: list[dict[str, str]] = []
        for sid, found in zip(schedule_ids, await self.read_hashes(schedule_ids), strict=True):
            if found is None:
                raise wrong_type(schedule_id=sid)
            else:
                out.append(found)
        return out

    async def read_hashes(self, schedule_ids: Sequence[str]) -> list[dict[str, str] | None]:
        """Like :meth:`fields`, with None for a key of the wrong type instead of raising.

        An active schedule's ``next_run`` is stored only as its score in the index or in its
        parked bucket, so it is read from there and added to the fields. READ_HASHES schedules
        a call of lua/read_hashes.lua (one JSON reply: far cheaper to parse than a reply
        element per field).
        """
        k = self.keys
        out: list[dict[str, str] | None] = []
        for start in range(0, len(schedule_ids), READ_HASHES):
            ids = schedule_ids[start : start + READ_HASHES]
            keys = [k.schedules]
            for sid in ids:
                keys += (k.schedule(sid), k.parked_of(sid))
            for entry in orjson.loads(await self.call_read("read_hashes", keys, ids)):
                if entry == "!":
                    out.append(None)
                    continue
                flat, score = entry
                fields = dict(zip(flat[::2], flat[1::2], strict=True)) if flat else {}
                out.append(_with_next_run(fields, float(score) if score else None))
        return out

    async def load(self, schedule_id: str) -> Schedule:
        (fields,) = await self.fields([schedule_id])
        if not fields:
            raise ScheduleNotFound(schedule_id)
        return Schedule.from_hash(schedule_id, fields)

    async def spec_history(self, schedule_id: str) -> list[SpecVersion]:
        """The schedule's kept specs, newest first (entries not rsched's are skipped); empty
        when it was never changed. Raises StateError when the key holds another type."""
        try:
            raw = await self.redis.lrange(self.keys.specs(schedule_id), 0, -1)
        except ResponseError as exc:
            raise wrong_type(schedule_id=schedule_id) from exc
        return [v for v in (spec_version(str(r)) for r in raw) if v is not None]

    async def exists(self, schedule_id: str) -> bool:
        return bool(await self.redis.exists(self.keys.schedule(schedule_id)))

    async def history(self, schedule_id: str, limit: int) -> list[dict[str, Any]]:
        """The events of the newest ``limit`` records of the schedule's history, newest first
        (rsched._core.history.stored_events)."""
        raw = await self.redis.lrange(self.keys.history(schedule_id), 0, limit - 1)
        return stored_events(raw, schedule_id)

    async def history_slice(self, rank: int, count: int) -> tuple[list[str], int]:
        """The ids of the next ``count`` schedules whose histories the retention sweep trims, and
        where the slice after them starts: ``rank`` is a rank in the schedules index, or past its
        end -1 - the number of a parked bucket (rsched._store.parking), whose ids come whole."""
        k = self.keys
        ids: list[str] = []
        if rank >= 0:
            try:
                ids = [
                    str(sid) for sid in await self.redis.zrange(k.schedules, rank, rank + count - 1)
                ]
            except ResponseError as exc:
                if "WRONGTYPE" not in str(exc):
                    raise
                # someone else's key: nothing of rsched's to trim
            rank = rank + count if len(ids) == count else -1
        if rank < 0 and len(ids) < count:  # past the index's end: the parked buckets
            more, after = await parking.bucket_ids(self.redis, k, -1 - rank, count - len(ids))
            ids += more
            rank = -1 - after if after else 0
        return ids, rank

    async def trim_histories(self, schedule_ids: Sequence[str], before_ms: int) -> int:
        """Drop the history records of ``schedule_ids`` older than ``before_ms``, naming each
        history key to the script (lua/trim_history.lua); returns the records removed."""
        if not schedule_ids:
            return 0
        keys = [self.keys.history(sid) for sid in schedule_ids]
        return int(await self.call("trim_history", keys, [before_ms]))

    async def index_stats(self, now_ms: int) -> IndexStats:
        """Counts of the schedules index at ``now_ms`` and the lease, for ``Client.stats``."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcard(k.schedules)
            pipe.zcount(k.schedules, "-inf", "(inf")
            pipe.zcount(k.schedules, "-inf", now_ms)
            pipe.zrange(k.schedules, "-inf", now_ms, byscore=True, offset=0, num=1, withscores=True)
            pipe.get(k.leader)
            pipe.pttl(k.leader)
            pipe.get(k.leader_ttl)
            total, active, due, oldest, leader, pttl, lease_ttl = await pipe.execute()
        parked = await parking.counts(self, now_ms)
        first = (str(oldest[0][0]), float(oldest[0][1])) if oldest else None
        first = parking.earliest(first, parked.oldest)
        return IndexStats(
            total=int(total) + parked.total,
            active=int(active) + parked.active,
            paused=await self._count_paused(parked.idle),
            due=int(due) + parked.due,
            oldest=(first[0], int(first[1])) if first else None,
            leader=str(leader) if leader else None,
            lease_left_ms=int(pttl),
            lease_ttl_ms=int(lease_ttl) if str(lease_ttl or "").isdigit() else None,
        )

    async def due_summary(self, now_ms: int, late_before_ms: int) -> DueSummary:
        """What is due at ``now_ms`` (parked schedules too: they stay parked while no scheduler
        leads): how many, the most overdue, and how many are due at or before
        ``late_before_ms``. A few O(log n) reads: every process of the deployment makes them
        for its metrics."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcount(k.schedules, "-inf", now_ms)
            pipe.zrange(k.schedules, "-inf", now_ms, byscore=True, offset=0, num=1, withscores=True)
            pipe.zcount(k.schedules, "-inf", late_before_ms)
            due, oldest, late = await pipe.execute()
        parked_due, parked_oldest = await parking.due(self.redis, k, now_ms)
        parked_late, _ = await parking.due(self.redis, k, late_before_ms)
        first = (str(oldest[0][0]), float(oldest[0][1])) if oldest else None
        first = parking.earliest(first, parked_oldest)
        return DueSummary(
            due=int(due) + parked_due,
            oldest_ms=int(first[1]) if first else None,
            late=int(late) + parked_late,
        )

    async def _count_paused(self, parked: list[str]) -> int:
        """Paused and completed schedules both sit at +inf (in the index, or ``parked``): tell
        them apart."""
        key, ids = self.keys.schedules, list[str]()
        while some := await self.redis.zrange(
            key, "+inf", "+inf", byscore=True, offset=len(ids), num=1000
        ):
            ids += [str(m) for m in some]
        ids += parked
        paused = 0
        for start in range(0, len(ids), 1000):
            async with self.redis.pipeline(transaction=False) as pipe:
                for sid in ids[start : start + 1000]:
                    pipe.hget(self.keys.schedule(sid), "status")
                paused += sum(1 for s in await pipe.execute() if s == "paused")
        return paused

    async def label_ids(self, pairs: Sequence[str]) -> set[str]:
        """The ids of this partition's schedules that carry every label ``k=v`` of ``pairs``: one
        SINTER of their label index sets (docs/labels.md). Raises StateError for an index key of
        another type."""
        try:
            return {str(sid) for sid in await self.redis.sinter(self.keys.labels(list(pairs)))}
        except ResponseError as exc:
            raise wrong_type(script="labels") from exc

    async def every_id(self) -> list[str]:
        """Every schedule id of this partition, the index's and the parked buckets' (the
        buckets in use), as lua/every_id.lua's one text. Raises StateError for a key of another
        type."""
        k = self.keys
        numbers = await self.redis.zrange(k.parked, 0, -1)
        keys = [k.schedules, *(k.parked_at(str(n)) for n in numbers)]
        reply = await self.call_read("every_id", keys, [])
        if isinstance(reply, int):
            check(reply, script="every_id")
        return str(reply).split("\n") if reply else []

    async def some_fields(
        self, schedule_ids: Sequence[str], names: Sequence[str]
    ) -> list[dict[str, str] | None]:
        """The fields ``names`` of each schedule's hash ({} when it does not exist, None for a
        key of another type), BULK_READ hashes a call of lua/plan_fields.lua (read-only)."""
        out: list[dict[str, str] | None] = []
        for start in range(0, len(schedule_ids), BULK_READ):
            keys = [self.keys.schedule(sid) for sid in schedule_ids[start : start + BULK_READ]]
            out += unpack_fields(await self.call_read("plan_fields", keys, names), names)
        return out

    async def index_after(self, pos: tuple[float, str] | None, n: int) -> list[tuple[str, float]]:
        """Up to ``n`` (id, score) entries of the index after position ``pos`` (score, id), in
        index order; from the start when ``pos`` is None. The position need not be in this
        index (another partition's schedule, or one that moved or went away): lua/index_after.lua
        finds where it would sit."""
        key = self.keys.schedules
        if pos is None:
            page = _pairs(await self.redis.zrange(key, 0, n - 1, withscores=True))
        else:
            args = [parking.score_arg(pos[0]), pos[1], n]
            flat = await self.call_read("index_after", [key], args)
            page = [(str(flat[i]), float(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]
        # Parked entries come in where they sort: only those at or before the page's last one
        # can, when the page is full.
        parked = await parking.after(self, pos, n, page[-1][1] if len(page) == n else math.inf)
        if not parked:
            return page
        return sorted(page + parked, key=lambda e: (e[1], e[0]))[:n]


def no_calendar(names: Sequence[str]) -> tuple[str, str]:
    """The problem of a schedule whose ``exclude`` names calendars that do not exist."""
    listed = ", ".join(repr(name) for name in names)
    create = words().set_calendar.format(name=names[0])
    return (
        "exclude",
        f"no exclusion calendar named {listed}; create it first ({create}) or leave it out",
    )


def _chunks(
    sends: Sequence[tuple[BulkItem, int | None]],
) -> list[Sequence[tuple[BulkItem, int | None]]]:
    """The items in calls of at most BULK_WRITE items and about BULK_WRITE_BYTES."""
    out: list[Sequence[tuple[BulkItem, int | None]]] = []
    start, size = 0, 0
    for n, (item, _) in enumerate(sends):
        size += len(item.spec.get("payload", ""))
        if n - start >= BULK_WRITE or (size > BULK_WRITE_BYTES and n > start):
            out.append(sends[start:n])
            start, size = n, len(item.spec.get("payload", ""))
    if start < len(sends):
        out.append(sends[start:])
    return out


def _wrong_types(schedule_ids: Sequence[str], *, written: bool = False) -> StateError:
    error = wrong_type(schedule_id=", ".join(schedule_ids))
    if written:
        return StateError(f"{error} (while written; the other schedules were written)")
    return StateError(f"{error} (nothing was written)")


def _unchanged(stored: dict[str, str], item: BulkItem) -> bool:
    """The stored spec is the item's, and so is its pause (a completed one stays completed)."""
    status = stored.get("status")
    spec = {n: v for n, v in stored.items() if n not in ("version", "status")}
    return spec == item.spec and (status == "completed" or (status == "paused") == item.paused)


def _pairs(raw: Any) -> list[tuple[str, float]]:
    return [(str(m), float(s)) for m, s in raw]


def stored_label_keys(keys: Keys, schedule_id: str, labels: str) -> list[str]:
    """The label index keys of a schedule's stored ``labels`` field; raises StateError when
    the field is not one rsched wrote (no key is built from it)."""
    try:
        return keys.labels(label_pairs(labels))
    except ValueError:
        raise StateError(
            f"schedule {schedule_id!r} has a labels field rsched did not write ({labels!r}); "
            "correct or delete it with redis-cli (HSET / HDEL ... labels)"
        ) from None


def split_version(version: str) -> tuple[str, str]:
    """(generation, created_at) of a hash's ``version`` field, ``"<generation>:<created_at>"``
    (docs/keys.md); empty strings when malformed."""
    gen, _, created = version.partition(":")
    return (gen, created) if gen.isdigit() and created.isdigit() else ("", "")


def unpack_fields(raw: str | bytes, names: Sequence[str]) -> list[dict[str, str] | None]:
    """The reply of lua/plan_fields.lua: each hash's named fields ({} when it does not exist,
    None when the key holds another type)."""
    out: list[dict[str, str] | None] = []
    for values in orjson.loads(raw):
        if values == "!":
            out.append(None)
        else:
            out.append(
                {n: v for n, v in zip(names, values or (), strict=False) if isinstance(v, str)}
            )
    return out


def state_fields(fields: dict[str, str]) -> dict[str, str]:
    """Readers see ``generation`` and ``created_at`` apart (the hash stores them as one)."""
    gen, created = split_version(fields.get("version", ""))
    if gen:
        fields["generation"], fields["created_at"] = gen, created
    return fields


def _with_next_run(fields: dict[str, str], score: object) -> dict[str, str]:
    state_fields(fields)
    # A score that is not a finite number (index of the wrong type, +inf for a paused or
    # completed schedule, absent) means no next run. A ``next_run`` field in the hash is never
    # used (docs/keys.md).
    fields.pop("next_run", None)
    if fields and "status" not in fields and isinstance(score, float) and math.isfinite(score):
        fields["next_run"] = str(int(score))
    return fields
