"""Redis access for queues: enqueue, the worker's script calls, dead letters and statistics.

The worker, the client SDK and the CLI all go through this module, so the layout of a queue's
keys (stream, consumer group, delayed set, dead-letter stream) lives in one place on the
Python side. Every write is a Lua script in lua/ that is safe to run twice.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar, cast

import orjson
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rsched._core.codes import Code, check
from rsched._core.errors import DeadLetterNotFound, InvalidArgument, InvalidJob
from rsched._core.job import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_S,
    DeadLetter,
    Enqueued,
    JobOptions,
)
from rsched._core.keys import GROUP, Keys
from rsched._core.rules import (
    DEFAULT_DEDUP_WINDOW_S,
    DEFAULT_MAX_PAYLOAD_BYTES,
    NAME_RE,
    PRIORITIES,
    Priority,
    check_dedup_window,
    check_name,
    check_page,
    check_priority,
    encode_payload,
    parse_duration_s,
)
from rsched._core.schedule import to_ms
from rsched._core.settings import DEFAULT_HISTORY_LIMIT, Settings
from rsched._core.workers import (
    JobInfo,
    WorkerInfo,
    fields_of,
    job_from_fields,
    parse_worker,
)
from rsched._redis import scripts as _lua
from rsched._redis.cluster import is_cluster
from rsched._redis.durability import Durability
from rsched._store.alerts import EventLog
from rsched._store.runs_log import run_record

PAGE = 500
#: Entries a lookup by execution id reads at most per stream and per delayed set (find_job.lua).
JOB_SCAN_LIMIT = 10_000
T = TypeVar("T")

Entry = tuple[str, dict[str, str]]
#: One stream of a queue: (queue name, priority level).
Lane = tuple[str, Priority]


@dataclass(frozen=True, slots=True)
class Done:
    """A finished run for ``complete``: its entry and the history event to record."""

    entry_id: str
    execution_id: str
    schedule_id: str | None
    attempt: int
    event: str  # completed | cancelled
    extra: str = ""  # JSON fragment ('' or ',"k":v…')
    dedup: bool = False  # an enqueued job with its own execution id (its dedup key is re-armed)
    result: bytes | None = None  # what the handler returned (JSON), kept before the ack
    run: str | None = None  # the runs log record (_runs.run_record); None: not logged


def fragment(fields: dict[str, Any]) -> str:
    """A JSON fragment (``,"k":v,…``) appended to a history event, or '' when empty."""
    return "," + orjson.dumps(fields).decode()[1:-1] if fields else ""


class QueueStore(_lua.ScriptCaller):
    """Queue-side script calls and reads for one Redis client and one key prefix."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        dead_letter_max_entries: int = 100_000,
        dedup_window_s: float = DEFAULT_DEDUP_WINDOW_S,
        runs_max_entries: int = 500_000,
    ) -> None:
        super().__init__(redis)
        self.keys = keys
        self.history_limit = history_limit
        self.max_payload_bytes = max_payload_bytes
        self.dead_letter_max_entries = dead_letter_max_entries
        self.dedup_window_s = dedup_window_s
        self.events = EventLog(redis, keys)
        self.runs_max_entries = runs_max_entries

    @classmethod
    def from_settings(
        cls, redis: Redis, settings: Settings, keys: Keys | None = None
    ) -> QueueStore:
        """The store for one deployment's limits and one partition's keys (the only partition
        when ``keys`` is not given)."""
        store = cls(
            redis,
            keys or Keys(settings.prefix),
            history_limit=settings.history_limit,
            max_payload_bytes=settings.max_payload_bytes,
            dead_letter_max_entries=settings.worker.dead_letter_max_entries,
            dedup_window_s=settings.dedup_window_s,
            runs_max_entries=settings.retention.runs_max_entries,
        )
        store.events.max_len = settings.health.events_max_len
        store.durability = Durability.from_settings(settings)
        return store

    def streams(self, queue: str) -> list[str]:
        """The queue's streams, one per priority level, in the order (normal, high, low) the
        scripts that route a job by its level (promote, requeue) take them."""
        k = self.keys
        return [k.queue(queue), k.queue(queue, "high"), k.queue(queue, "low")]

    # --- producers ---------------------------------------------------------------------------

    async def enqueue(
        self,
        task: str,
        payload: dict[str, Any] | None = None,
        *,
        queue: str = "default",
        delay_s: float | str | timedelta = 0,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        execution_id: str | None = None,
        retry_base_s: float | None = None,
        retry_multiplier: float | None = None,
        retry_max_s: float | None = None,
        retry_jitter: float | None = None,
        priority: Priority = "normal",
        dedup_window_s: float | None = None,
        job_id: str | None = None,
    ) -> Enqueued:
        """Add a one-off job. Raises InvalidJob naming the bad field.

        ``delay_s`` is a duration (seconds, "90s", "5m", a timedelta): the job waits in the
        queue's delayed set until then (Redis time).
        With an ``execution_id`` the call is idempotent: while a job with that id waits, runs
        or finished less than ``dedup_window_s`` ago, nothing is added and the result names
        the existing job (``created=False``). Without one the job gets ``job_id`` (a caller
        that must know the job's partition makes it with new_execution_id) or a new random
        id, and skips that check.
        """
        _job_field("task", check_name, task, "task name")
        _job_field("queue", check_name, queue, "queue name")
        level = _job_field("priority", check_priority, priority)
        dedup_ms: int | None = None
        if execution_id is None:
            execution_id = job_id or new_execution_id()
            if dedup_window_s is not None:
                _job_field("dedup_window_s", check_dedup_window, dedup_window_s)
        else:
            _job_field("execution_id", check_name, execution_id, "execution id")
            window = self.dedup_window_s if dedup_window_s is None else dedup_window_s
            dedup_ms = round(_job_field("dedup_window_s", check_dedup_window, window) * 1000)
        limit = self.max_payload_bytes
        body = _job_field("payload", encode_payload, {} if payload is None else payload, limit)
        options = JobOptions.checked(
            max_retries=max_retries,
            timeout_s=timeout_s,
            retry_base_s=retry_base_s,
            retry_multiplier=retry_multiplier,
            retry_max_s=retry_max_s,
            retry_jitter=retry_jitter,
        )
        delay = _job_field("delay_s", functools.partial(parse_duration_s, allow_zero=True), delay_s)
        if delay > 10 * 365 * 86400:
            raise InvalidJob("delay_s", f"at most 10 years, got {delay:g} s")
        fields = [
            "execution_id", execution_id,
            "task", task,
            "payload", body.decode(),
            "attempt", "1",
            "origin", "enqueue",
            "opts", options.encode(),
        ]  # fmt: skip
        if level != "normal":
            fields += ["priority", level]  # a retry or a requeue keeps it (lua/promote.lua)
        k = self.keys
        keys = [k.queue(queue, level), k.delayed_queue(queue), k.queues]
        if dedup_ms is not None:
            fields += ["dedup", str(dedup_ms)]
            keys.append(k.dedup(execution_id))
        op_key, op_id = k.new_op()
        res = await self.call(
            "enqueue",
            [*keys[:3], op_key, *keys[3:]],
            [queue, round(delay * 1000), op_id, *fields],
        )
        if isinstance(res, list) and res and int(res[0]) == Code.EXISTS:
            return Enqueued(execution_id, created=False)
        check(res, script="enqueue", queue=queue)
        return Enqueued(execution_id, created=True)

    # --- dead letters --------------------------------------------------------------------------

    async def dead_letters(
        self,
        queue: str = "default",
        *,
        limit: int = 100,
        cursor: str | None = None,
        task: str | None = None,
        inclusive: bool = False,
    ) -> tuple[list[DeadLetter], str | None]:
        """A page of dead letters, newest first, and the cursor of the next page (or None):
        those after the entry id ``cursor`` (from it with ``inclusive``)."""
        try:
            check_page(limit)
        except ValueError as exc:
            raise InvalidArgument("limit", str(exc)) from None
        key = self.keys.dead(queue)
        start = (cursor if inclusive else f"({cursor}") if cursor else "+"
        out: list[DeadLetter] = []
        while True:
            want = limit - len(out) if task is None else PAGE
            try:
                page = cast(list[Entry], await self.redis.xrevrange(key, start, "-", count=want))
            except ResponseError as exc:
                raise InvalidArgument("cursor", f"{cursor!r} is not an entry id ({exc})") from None
            for entry_id, fields in page:
                letter = DeadLetter.from_entry(queue, entry_id, fields)
                if task is None or letter.task == task:
                    out.append(letter)
                    if len(out) == limit:
                        return out, entry_id
            if len(page) < want:
                return out, None
            start = f"({page[-1][0]}"

    async def dead_letter(self, queue: str, entry_id: str) -> DeadLetter:
        """One dead letter; raises DeadLetterNotFound."""
        try:
            found = cast(
                list[Entry], await self.redis.xrange(self.keys.dead(queue), entry_id, entry_id)
            )
        except ResponseError:
            raise DeadLetterNotFound(queue, entry_id) from None
        if not found:
            raise DeadLetterNotFound(queue, entry_id)
        return DeadLetter.from_entry(queue, found[0][0], found[0][1])

    async def _matching(self, queue: str, task: str | None) -> Iterable[list[str]]:
        """Pages of dead-letter ids (oldest first) whose task matches (all when task is None)."""
        key = self.keys.dead(queue)
        start = "-"
        pages: list[list[str]] = []
        while True:
            page = cast(list[Entry], await self.redis.xrange(key, start, "+", count=PAGE))
            ids = [eid for eid, fields in page if task is None or _dead_task(fields) == task]
            if ids:
                pages.append(ids)
            if len(page) < PAGE:
                return pages
            start = f"({page[-1][0]}"

    async def requeue(
        self, queue: str, entry_ids: Sequence[str] | None = None, *, task: str | None = None
    ) -> int:
        """Put dead letters back on the queue as attempt 1; returns how many were re-queued.

        ``entry_ids=None`` re-queues every dead letter of the queue (of ``task`` if given).
        """
        moved = 0
        async for chunk in self._selected(queue, entry_ids, task):
            res = int(
                await self.call("requeue", [self.keys.dead(queue), *self.streams(queue)], chunk)
            )
            if res < 0:
                check(res, script="requeue", queue=queue)
            moved += res
        if moved:
            await self.redis.sadd(self.keys.queues, queue)
        return moved

    async def _selected(
        self, queue: str, entry_ids: Sequence[str] | None, task: str | None
    ) -> AsyncIterator[list[str]]:
        """The dead letters ``requeue`` / ``purge`` act on, in non-empty chunks of at most PAGE
        ids: ``entry_ids`` (those of ``task`` when given too), or when None every dead letter
        of the queue (of ``task``)."""
        pages = [list(entry_ids)] if entry_ids is not None else await self._matching(queue, task)
        for ids in pages:
            for start in range(0, len(ids), PAGE):
                chunk = ids[start : start + PAGE]
                if task is not None and entry_ids is not None:
                    chunk = await self._filter_ids(queue, chunk, task)
                if chunk:
                    yield chunk

    async def _filter_ids(self, queue: str, ids: list[str], task: str) -> list[str]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for eid in ids:
                pipe.xrange(self.keys.dead(queue), eid, eid)
            found: list[list[Entry]] = await pipe.execute()
        return [
            eid
            for eid, hit in zip(ids, found, strict=True)
            if hit and _dead_task(hit[0][1]) == task
        ]

    async def purge(
        self, queue: str, entry_ids: Sequence[str] | None = None, *, task: str | None = None
    ) -> int:
        """Delete dead letters for good; returns how many were deleted.

        ``entry_ids=None`` deletes every dead letter of the queue (of ``task`` if given).
        """
        key = self.keys.dead(queue)
        if entry_ids is None and task is None:
            # Atomic on one server; a cluster pipeline (redis-py before 7) has no MULTI.
            async with self.redis.pipeline(transaction=not is_cluster(self.redis)) as pipe:
                pipe.xlen(key)
                pipe.delete(key)
                count, _ = await pipe.execute()
            return int(count)
        deleted = 0
        async for chunk in self._selected(queue, entry_ids, task):
            deleted += int(await self.redis.xdel(key, *chunk))
        return deleted

    # --- statistics ----------------------------------------------------------------------------

    async def queue_names(self) -> list[str]:
        return sorted(str(q) for q in await self.redis.smembers(self.keys.queues))

    async def queue_stats(self) -> dict[str, dict[str, int | float | None]]:
        """Per queue: length, pending, consumers, delayed, dead, oldest_pending_ms (age).

        Length and pending count every priority level; ``high`` and ``low`` say how many of the
        length wait in those levels' streams; consumers are those of the normal stream (a worker
        reads all levels of its queues)."""
        names = await self.queue_names()
        cluster = is_cluster(self.redis)
        async with self.redis.pipeline(transaction=False) as pipe:
            if not cluster:  # a cluster pipeline takes commands on keys only
                pipe.time()
            for name in names:
                for level in PRIORITIES:
                    pipe.xlen(self.keys.queue(name, level))
                pipe.zcard(self.keys.delayed_queue(name))
                pipe.xlen(self.keys.dead(name))
            head = await pipe.execute(raise_on_error=False)
        if cluster:  # the clock of the partition's node
            now_ms = await self.time_ms()
        else:
            seconds, micros = head.pop(0)
            now_ms = int(seconds) * 1000 + int(micros) // 1000
        lanes = [(name, level) for name in names for level in PRIORITIES]
        # Each stream's group (no stream or no group yet: an error, skipped), then the oldest
        # pending entry of those that hold some: two round trips whatever the queues.
        async with self.redis.pipeline(transaction=False) as pipe:
            for name, level in lanes:
                pipe.xinfo_groups(self.keys.queue(name, level))
            infos = await pipe.execute(raise_on_error=False)
        groups = {lane: _group(info) for lane, info in zip(lanes, infos, strict=True)}
        held = [lane for lane, g in groups.items() if g and int(g["pending"])]
        async with self.redis.pipeline(transaction=False) as pipe:
            for name, level in held:
                pipe.xpending(self.keys.queue(name, level), GROUP)
            summaries = dict(zip(held, await pipe.execute(raise_on_error=False), strict=True))
        out: dict[str, dict[str, int | float | None]] = {}
        per = len(PRIORITIES) + 2
        for i, name in enumerate(names):
            values = [_as_int(v) for v in head[i * per : (i + 1) * per]]
            lengths = dict(zip(PRIORITIES, values, strict=False))
            delayed, dead = values[-2], values[-1]
            pending, consumers, oldest = 0, 0, None
            for level in PRIORITIES:
                group = groups[(name, level)]
                if group is None:
                    continue
                pending += int(group["pending"])
                if level == "normal":
                    consumers = int(group["consumers"])
                summary = summaries.get((name, level))
                low = summary.get("min") if isinstance(summary, dict) else None
                if low:
                    age = max(0, now_ms - int(str(low).split("-")[0]))
                    oldest = age if oldest is None else max(oldest, age)
            out[name] = {
                "length": sum(lengths.values()),
                "pending": pending,
                "consumers": consumers,
                "delayed": delayed,
                "dead": dead,
                "oldest_pending_ms": oldest,
                "high": lengths["high"],
                "low": lengths["low"],
            }
        return out

    async def has_group(self, queue: str) -> bool:
        """Whether the queue's stream has the workers' consumer group (a worker's /readyz)."""
        try:
            groups = await self.redis.xinfo_groups(self.keys.queue(queue))
        except ResponseError:
            return False  # no stream yet
        return any(group.get("name") == GROUP for group in groups)

    # --- worker ----------------------------------------------------------------------------------

    async def create_groups(self, queues: Sequence[str]) -> None:
        """Create the consumer group on each stream (every priority level) of each queue (from
        the stream's start; idempotent)."""
        for queue in queues:
            for stream in self.streams(queue):
                try:
                    await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
                except ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise
        await self.redis.sadd(self.keys.queues, *queues)

    async def read(
        self, lanes: Sequence[Lane], consumer: str, count: int, block_ms: int
    ) -> list[tuple[Lane, list[Entry]]]:
        """New entries for this consumer from the streams of ``lanes`` (queue, level):
        [(lane, [(entry id, fields)])]."""
        by_key = {self.keys.queue(q, level): (q, level) for q, level in lanes}
        streams: dict[Any, Any] = dict.fromkeys(by_key, ">")
        res: Any = await self.redis.xreadgroup(
            GROUP, consumer, streams, count=count, block=block_ms
        )
        if not res:
            return []
        if isinstance(res, dict):  # RESP3
            return [(by_key[str(k)], v[0] if v and isinstance(v[0], list) else v)
                    for k, v in res.items()]  # fmt: skip
        return [(by_key[str(key)], entries) for key, entries in res]

    async def take(
        self, lanes: Sequence[Lane], consumer: str, count: int
    ) -> list[tuple[Lane, list[Entry]]]:
        """Like :meth:`read` without blocking, at most ``count`` entries in all, in the order
        of ``lanes``; one JSON reply instead of a RESP field per value (see lua/take.lua)."""
        raw = await self.call(
            "take", [self.keys.queue(q, level) for q, level in lanes], [GROUP, consumer, count]
        )
        doc = orjson.loads(raw)
        out: list[tuple[Lane, list[Entry]]] = []
        if not isinstance(doc, list):  # cjson writes an empty list as {}
            return out
        for index, entries in doc:
            if isinstance(entries, list):
                out.append((lanes[int(index) - 1], [(str(e[0]), e[1] or {}) for e in entries]))
        return out

    async def start(
        self,
        queue: str,
        worker: str,
        items: Sequence[tuple[str, str, str, int, str]],
        priority: Priority = "normal",
    ) -> list[Code]:
        """Mark schedule jobs running; items (entry id, exec id, schedule id, attempt, extra).
        Returns OK (run it) or SUPERSEDED (already acknowledged, do not run) per item."""
        keys = [self.keys.queue(queue, priority)]
        args: list[Any] = [GROUP, self.history_limit, worker]
        for entry_id, exec_id, sid, attempt, extra in items:
            keys += [self.keys.history(sid), self.keys.schedule(sid)]
            args += [entry_id, exec_id, attempt, extra]
        keys.append(self.keys.runs)  # where a superseded job is recorded as cancelled
        return [Code(int(c)) for c in await self.call("start", keys, args)]

    async def complete(
        self, queue: str, done: Sequence[Done], priority: Priority = "normal"
    ) -> int:
        """Acknowledge finished runs and record their events; returns how many were recorded
        (the others were no longer pending)."""
        keys = [self.keys.queue(queue, priority)]
        items: list[tuple[Any, ...]] = []
        for d in done:
            if d.schedule_id:
                sid = d.schedule_id
                keys += [self.keys.history(sid), self.keys.schedule(sid), self.keys.pending(sid)]
            item: tuple[Any, ...] = (
                d.entry_id, d.execution_id, d.schedule_id or "", d.attempt, d.event, d.extra
            )  # fmt: skip
            if d.dedup:
                keys.append(self.keys.dedup(d.execution_id))
            if d.run is not None:
                item = (*item, 1 if d.dedup else 0, d.run)
            elif d.dedup:
                item = (*item, 1)
            items.append(item)
        keys.append(self.keys.runs)
        args = [GROUP, self.history_limit, orjson.dumps(items), self.runs_max_entries]
        recorded = int(await self.call("complete", keys, args))
        if recorded < 0:
            check(recorded, script="complete", queue=queue)
        return recorded

    async def retry(
        self,
        queue: str,
        entry_id: str,
        *,
        next_fields: Sequence[str],
        delay_ms: int,
        execution_id: str,
        schedule_id: str | None,
        attempt: int,
        event: str,
        extra: str,
        priority: Priority = "normal",
        run: str = "",
    ) -> int | None:
        """Schedule the next attempt; returns its due time (ms) or None when not pending.
        ``next_fields`` carry the job's level (its 'priority' field) for the promoter; ``run``
        is the attempt's record for the runs log (_runs.run_record)."""
        stream = self.keys.queue(queue, priority)
        history = self.keys.history(schedule_id) if schedule_id else stream
        hash_key = self.keys.schedule(schedule_id) if schedule_id else stream
        res = await self.call(
            "retry",
            [stream, self.keys.delayed_queue(queue), history, hash_key, self.keys.runs],
            [
                GROUP,
                entry_id,
                max(0, delay_ms),
                orjson.dumps(list(next_fields)).decode(),
                self.history_limit,
                execution_id,
                attempt,
                event,
                "1" if schedule_id else "0",
                extra,
                self.runs_max_entries,
                run,
            ],
        )
        if check(res, script="retry", queue=queue) == Code.NOT_PENDING:
            return None
        return int(res[1])

    async def dead(
        self,
        queue: str,
        entry_id: str,
        *,
        raw: dict[str, str],
        reason: str,
        error_type: str = "",
        error_message: str = "",
        traceback: str = "",
        deliveries: int = 1,
        worker: str = "",
        first_event: str = "",
        extra: str = "",
        priority: Priority = "normal",
        run: str = "",
    ) -> str | None:
        """Move an entry to the dead-letter stream; returns the dead letter's id (None when the
        entry was no longer pending). The stored job names its level, for ``requeue``; ``run``
        is the run's record for the runs log (_runs.run_record)."""
        sid = raw.get("schedule_id") or ""
        has_schedule = bool(sid) and NAME_RE.match(sid) is not None
        k = self.keys
        stream = k.queue(queue, priority)
        keys = [stream, k.dead(queue)]
        if has_schedule:
            keys += [k.history(sid), k.schedule(sid), k.pending(sid)]
        else:
            keys += [stream] * 3
        exec_id = raw.get("execution_id", "")
        # The dedup key, or the stream in its place (dead.lua leaves a key of another type
        # alone), then the runs log.
        has_dedup = bool(raw.get("dedup")) and NAME_RE.match(exec_id) is not None
        keys += [k.dedup(exec_id) if has_dedup else stream, k.runs]
        job = {name: value for name, value in raw.items() if name != "priority"}
        if priority != "normal":
            job["priority"] = priority
        flat = [v for pair in job.items() for v in pair]
        fields = [
            "reason", reason,
            "execution_id", raw.get("execution_id", ""),
            "task", raw.get("task", ""),
            "schedule_id", sid,
            "error_type", error_type,
            "error_message", error_message[:2000],
            "traceback", traceback,
            "deliveries", str(deliveries),
            "worker", worker,
            "job", orjson.dumps(flat).decode(),
        ]  # fmt: skip
        res = await self.call(
            "dead",
            keys,
            [
                GROUP,
                entry_id,
                self.dead_letter_max_entries,
                self.history_limit,
                "1" if has_schedule else "0",
                raw.get("execution_id", ""),
                raw.get("attempt", "1"),
                first_event,
                extra,
                self.runs_max_entries,
                run,
                *fields,
            ],
        )
        if check(res, script="dead", queue=queue) == Code.NOT_PENDING:
            return None
        # Recorded after the script (best effort): the dead letter is written either way.
        await self.events.publish(
            "dead_letter",
            queue=queue,
            entry_id=res[1],
            execution_id=raw.get("execution_id"),
            task=raw.get("task"),
            schedule_id=sid,
            reason=reason,
        )
        return str(res[1])

    async def heartbeat(
        self, queue: str, consumer: str, entry_ids: Sequence[str], priority: Priority = "normal"
    ) -> list[str]:
        """Keep entries fresh; returns the ids this consumer no longer holds."""
        if not entry_ids:
            return []
        lost = await self.call(
            "heartbeat", [self.keys.queue(queue, priority)], [GROUP, consumer, *entry_ids]
        )
        return [str(x) for x in lost]

    async def reclaim(
        self, starts: Sequence[tuple[Lane, str]], consumer: str, min_idle_ms: int, count: int
    ) -> list[tuple[str, list[tuple[str, dict[str, str], int]]]]:
        """Claim idle entries of the streams of ``starts`` ((queue, level), start id), at most
        ``count`` in all, in that order, in one call: per stream (next start id, [(entry id,
        fields, deliveries)]). A reclaimed job stays in its stream, so it keeps its level."""
        keys = [self.keys.queue(queue, level) for (queue, level), _ in starts]
        args = [GROUP, consumer, min_idle_ms, count, *(start for _, start in starts)]
        out = []
        for nxt, found in await self.call("reclaim", keys, args):
            claimed = []
            for entry_id, flat, deliveries in found:
                fields = {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
                claimed.append((str(entry_id), fields, int(deliveries)))
            out.append((str(nxt), claimed))
        return out

    async def promote(self, queues: Sequence[str], limit: int = 1000) -> tuple[int, int | None]:
        """Move the due delayed jobs of ``queues`` into the streams of their levels, in one
        call: (moved, ms until the next is due or None). ``limit`` bounds the moves of one call
        (all queues together): a caller that moved ``limit`` calls again."""
        keys: list[str] = []
        for queue in queues:
            keys += [self.keys.delayed_queue(queue), *self.streams(queue)]
        res = await self.call("promote", keys, [limit])
        if int(res[0]) < 0:
            check(res, script="promote", queue=",".join(queues))
        wait = int(res[1])
        return int(res[0]), (wait if wait >= 0 else None)

    async def forget_consumers(self, queues: Sequence[str], *, keep: str, idle_ms: int) -> int:
        """Delete group consumers idle longer than ``idle_ms`` that hold no pending entry
        (workers that are gone); returns how many. Harmless for a live but quiet worker: it
        holds nothing, and its next read re-creates its consumer."""
        forgotten = 0
        for queue in queues:
            for stream in self.streams(queue):
                consumers = await self.redis.xinfo_consumers(stream, GROUP)
                for c in consumers:
                    name = str(c.get("name"))
                    if (
                        name != keep
                        and not int(c.get("pending", 0))
                        and int(c.get("idle", 0)) > idle_ms
                    ):
                        await self.redis.xgroup_delconsumer(stream, GROUP, name)
                        forgotten += 1
        return forgotten

    # --- worker registry -----------------------------------------------------------------------

    async def register(self, worker_id: str, record: bytes, ttl_ms: int, prune_ms: int) -> int:
        """Write a worker's registry record (one round trip); returns the Redis time (ms)."""
        res = await self.call(
            "register",
            [self.keys.workers, self.keys.worker(worker_id)],
            [worker_id, record, ttl_ms, prune_ms],
        )
        check(res, script="register")
        return int(res[1])

    async def unregister(self, worker_id: str) -> None:
        """Remove a worker's registry entry at once (a clean stop)."""
        await self.call("unregister", [self.keys.workers, self.keys.worker(worker_id)], [worker_id])

    async def workers(self) -> list[WorkerInfo]:
        """Live workers (their record has not expired), by id."""
        ids = cast(
            list[tuple[str, float]],
            await self.redis.zrange(self.keys.workers, 0, -1, withscores=True),
        )
        if not ids:
            return []
        records = await self.redis.mget([self.keys.worker(str(i)) for i, _ in ids])
        out = []
        for (worker_id, score), raw in zip(ids, records, strict=True):
            info = parse_worker(raw, int(score)) if raw else None
            if info is not None and info.id == str(worker_id):
                out.append(info)
        return out

    async def hand_back(
        self,
        queue: str,
        consumer: str,
        entry_ids: Sequence[str],
        idle_ms: int,
        priority: Priority = "normal",
    ) -> int:
        """Give entries this consumer holds to the next reclaim at once; returns how many."""
        if not entry_ids:
            return 0
        res = await self.call(
            "hand_back", [self.keys.queue(queue, priority)], [GROUP, consumer, idle_ms, *entry_ids]
        )
        return int(res)

    # --- results -----------------------------------------------------------------------------

    async def store_results(self, results: Sequence[tuple[str, bytes]], ttl_ms: int) -> None:
        """Keep handlers' return values (execution id, JSON) for ``ttl_ms`` (SET: idempotent)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for execution_id, body in results:
                pipe.set(self.keys.result(execution_id), body, px=ttl_ms)
            await pipe.execute()

    async def result(self, execution_id: str) -> tuple[bool, Any]:
        """(kept, value): what the job's handler returned, while it is kept."""
        raw = await self.redis.get(self.keys.result(execution_id))
        if raw is None:
            return False, None
        try:
            return True, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return True, str(raw)

    # --- jobs ----------------------------------------------------------------------------------

    async def jobs(
        self,
        queues: Sequence[str],
        states: Sequence[str],
        limit: int,
        skip: int,
        workers: Sequence[WorkerInfo] | None = None,
    ) -> tuple[list[JobInfo], bool]:
        """Jobs that run, wait or are delayed, queue by queue (running, then queued by level,
        then delayed by due time), each waiting one with why it waits; the ``skip`` first are
        left out. Returns (jobs, more).

        ``workers``: the live workers' records (read from the registry when None). An entry
        held by a worker not among them waits to be taken over: it is listed as queued."""
        want = skip + limit + 1
        found: list[JobInfo] = []
        live = await self.workers() if workers is None else workers
        for queue in queues:
            if "running" in states or "queued" in states:
                for level in PRIORITIES:
                    most = want - len(found)
                    found += await self._stream_jobs(queue, level, states, most, live)
                    if len(found) >= want:
                        break
            if "delayed" in states and len(found) < want:
                found += await self._delayed_jobs(queue, want - len(found), live)
            if len(found) >= want:
                break
        if "running" in states and "queued" in states:
            found.sort(key=lambda j: (j.queue or "", j.state != "running"))
        page = found[skip : skip + limit]
        return page, len(found) > skip + limit

    async def _stream_jobs(
        self,
        queue: str,
        level: Priority,
        states: Sequence[str],
        most: int,
        workers: Sequence[WorkerInfo],
    ) -> list[JobInfo]:
        key = self.keys.queue(queue, level)
        out: list[JobInfo] = []
        if most <= 0:
            return out
        try:
            pending = await self.redis.xpending_range(key, GROUP, "-", "+", most)
        except ResponseError:
            pending = []  # no stream or group yet
        held = {str(p["message_id"]): p for p in pending}
        running = {i: p for i, p in held.items() if _runs_on(p, workers)}
        if "running" in states and running:
            now_ms = await self.time_ms()
            async with self.redis.pipeline(transaction=False) as pipe:
                for entry_id in running:
                    pipe.xrange(key, entry_id, entry_id)
                hits: list[list[Entry]] = await pipe.execute()
            for (entry_id, p), hit in zip(running.items(), hits, strict=True):
                if hit:
                    out.append(_running_job(queue, level, entry_id, hit[0][1], p, now_ms))
        if "queued" in states and len(out) < most:
            start = "-"
            while len(out) < most:
                page = cast(list[Entry], await self.redis.xrange(key, start, "+", count=PAGE))
                for entry_id, fields in page:
                    if entry_id not in running:
                        taken = held.get(entry_id)
                        out.append(_queued_job(queue, level, entry_id, fields, taken, workers))
                        if len(out) >= most:
                            break
                if len(page) < PAGE:
                    break
                start = f"({page[-1][0]}"
        return out

    async def _delayed_jobs(
        self, queue: str, most: int, live: Sequence[WorkerInfo]
    ) -> list[JobInfo]:
        members = cast(
            list[tuple[str, float]],
            await self.redis.zrange(self.keys.delayed_queue(queue), 0, most - 1, withscores=True),
        )
        out = []
        for member, score in members:
            try:
                flat = orjson.loads(member)
            except orjson.JSONDecodeError:
                continue
            if isinstance(flat, list):
                fields = fields_of(flat)
                out.append(
                    job_from_fields("delayed", queue, fields, due_ms=int(score), workers=live)
                )
        return out

    async def find_job(
        self,
        execution_id: str,
        queues: Sequence[str],
        workers: Sequence[WorkerInfo] | None = None,
    ) -> tuple[JobInfo, str] | None:
        """Where a job waits or runs (a scan bounded by JOB_SCAN_LIMIT per key), a waiting one
        with why it waits: the job and its stream entry id or delayed member; None when not
        found. ``workers`` as for :meth:`jobs`."""
        streams = [(q, level) for q in queues for level in PRIORITIES]
        keys = [self.keys.queue(q, level) for q, level in streams]
        keys += [self.keys.delayed_queue(q) for q in queues]
        if not keys:
            return None
        res = await self.call_read("find_job", keys, [execution_id, JOB_SCAN_LIMIT, len(streams)])
        if not res:
            return None
        index, where, flat, due = int(res[0]), str(res[1]), res[2], res[3]
        fields = fields_of(flat)
        if index <= len(streams):
            queue, level = streams[index - 1]
            key = self.keys.queue(queue, level)
            try:
                p = await self.redis.xpending_range(key, GROUP, where, where, 1)
            except ResponseError:
                p = []
            live = await self.workers() if workers is None else workers
            if p and _runs_on(p[0], live):
                job = _running_job(queue, level, where, fields, p[0], await self.time_ms())
            else:
                job = _queued_job(queue, level, where, fields, p[0] if p else None, live)
            return job, where
        queue = queues[index - len(streams) - 1]
        live = await self.workers() if workers is None else workers
        return job_from_fields(
            "delayed", queue, fields, due_ms=int(float(due)), workers=live
        ), where

    async def cancel_running(self, execution_id: str, reason: str = "cancelled") -> int:
        """Ask the workers to cancel a running job (``<execution id> <reason>`` on the cancel
        channel; a worker of an older rsched ignores a message with a reason). Returns how many
        workers heard it."""
        return int(await self.redis.publish(self.keys.cancel, f"{execution_id} {reason}"))

    async def cancel_waiting(self, job: JobInfo, where: str, *, reason: str) -> Code:
        """Remove a queued or delayed job and record it cancelled: OK, NOT_FOUND (gone
        meanwhile) or RUNNING (a worker read it meanwhile)."""
        assert job.queue is not None
        level: Priority = "normal"
        for known in PRIORITIES:
            if job.priority == known:
                level = known
        k = self.keys
        stream = k.queue(job.queue, level)
        sid = job.schedule_id
        has_schedule = bool(sid) and NAME_RE.match(sid or "") is not None
        keys = [stream, k.delayed_queue(job.queue)]
        if has_schedule:
            assert sid is not None
            keys += [k.history(sid), k.schedule(sid), k.pending(sid)]
        else:
            keys += [stream] * 3
        has_dedup = job.schedule_id is None and NAME_RE.match(job.execution_id) is not None
        # The dedup key, or the stream in its place (cancel.lua leaves a key of another type
        # alone), then the runs log and its record of the cancelled job.
        keys += [k.dedup(job.execution_id) if has_dedup else stream, k.runs]
        run = run_record(
            {
                "execution_id": job.execution_id,
                "schedule_id": sid or "",
                "task": job.task or "",
                "attempt": str(job.attempt or 1),
                "fired_at": str(to_ms(job.enqueued_at)) if job.enqueued_at else "",
            },
            queue=job.queue,
            status="cancelled",
            error_type=reason,
        )
        res = await self.call(
            "cancel",
            keys,
            [
                GROUP,
                "delayed" if job.state == "delayed" else "stream",
                where,
                job.execution_id,
                job.attempt or 1,
                self.history_limit,
                "1" if has_schedule else "0",
                fragment({"reason": reason}),
                self.runs_max_entries,
                run,
            ],
        )
        code = Code(int(res))
        if code == Code.WRONG_TYPE:
            check(res, script="cancel", queue=job.queue)
        return code


def new_execution_id() -> str:
    """A random execution id for an enqueued job given none."""
    return f"job-{uuid.uuid4().hex}"


def _job_field(field: str, check: Callable[..., T], *args: Any) -> T:
    """``check(*args)``, its ValueError raised as InvalidJob naming ``field``."""
    try:
        return check(*args)
    except ValueError as exc:
        raise InvalidJob(field, str(exc)) from None


def _runs_on(pending: Any, workers: Sequence[WorkerInfo]) -> bool:
    """Whether the worker an entry is pending under (an XPENDING item) is one of the live
    ``workers``."""
    consumer = str(pending["consumer"])
    return any(w.id == consumer for w in workers)


def _running_job(
    queue: str, level: Priority, entry_id: str, fields: dict[str, str], pending: Any, now_ms: int
) -> JobInfo:
    """A job its worker runs: it started when its entry was delivered, as long as no
    heartbeat has refreshed the entry since (the worker's registry record, rewritten right
    after each heartbeat, says when afterwards: Client.job and Client.jobs read it)."""
    return job_from_fields(
        "running",
        queue,
        fields,
        priority=level,
        entry_id=entry_id,
        worker=str(pending["consumer"]),
        deliveries=int(pending["times_delivered"]),
        started_ms=now_ms - int(pending["time_since_delivered"]),
    )


def _queued_job(
    queue: str,
    level: Priority,
    entry_id: str,
    fields: dict[str, str],
    pending: Any,
    workers: Sequence[WorkerInfo],
) -> JobInfo:
    """A job that waits in its stream, with why it waits: not read yet, or (``pending``, an
    XPENDING item) read by a worker that is gone, until another worker takes it over."""
    deliveries = int(pending["times_delivered"]) if pending is not None else None
    return job_from_fields(
        "queued",
        queue,
        fields,
        priority=level,
        entry_id=entry_id,
        deliveries=deliveries,
        workers=workers,
    )


def _dead_task(fields: dict[str, str]) -> str:
    return fields.get("task", "")


def _group(info: Any) -> dict[str, Any] | None:
    """The workers' consumer group among a stream's XINFO GROUPS (None: no stream or group)."""
    if isinstance(info, BaseException):
        return None
    return next((g for g in info if g.get("name") == GROUP), None)


def _as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
