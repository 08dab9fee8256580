"""Redis access for the worker's calls on its queues: read, take, start, complete, retry, dead,
heartbeat, reclaim, promote, hand back, and keeping results.

Every write is a Lua script in lua/ that is safe to run twice (a worker re-sends after a lost
reply). The class is a part of QueueStore (rsched._store.queues), which sets the limits it
reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from rsched._core.codes import Code, check
from rsched._core.job import Entry, Lane
from rsched._core.keys import GROUP
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS
from rsched._core.rules import NAME_RE, Priority
from rsched._redis import scripts
from rsched._store.alerts import EventLog
from rsched._store.flow_keys import step_keys
from rsched._store.runs_log import label_index_keys, run_index_keys

log = get_logger("rsched.worker")
#: Characters of a run's error a pause note keeps (check_pause_note allows 500 in all).
LAST_ERROR_MAX = 300


@dataclass(slots=True)
class Done:
    """A finished run for ``complete``: its entry and the history event to record. Not frozen:
    a worker makes one a job, and a frozen dataclass of this size takes 4 µs to build where
    this takes 0.5 µs (nothing changes one once made)."""

    entry_id: str
    execution_id: str
    schedule_id: str | None
    attempt: int
    event: str  # completed | cancelled
    extra: str = ""  # JSON fragment ('' or ',"k":v…')
    dedup: bool = False  # an enqueued job with its own execution id (its dedup key is re-armed)
    result: bytes | None = None  # what the handler returned (JSON), kept before the ack
    run: str | None = None  # the runs log record (runs_log.run_record); None: not logged
    # The limits the job holds, (key, template) each: released with the ack.
    limits: tuple[tuple[str, str], ...] = ()
    # The partition of its schedule when the job ran from another one's stream (a job holding
    # limits runs from partition 0): the schedule's side is recorded there (``finish``).
    home: int | None = None
    # Its schedule pauses after failed runs: a completed run clears the count.
    counted: bool = False
    # A flow step's job: its flow id, step number, the keys its end may write (flows.step_keys)
    # and what its children get in its place (JSON, '' = null).
    flow: str = ""
    step: int = 0
    flow_keys: tuple[str, ...] = ()
    parent_result: str = ""


@dataclass(frozen=True, slots=True)
class Expiring:
    """A job about to start that has a start deadline, for ``expire``. ``schedule_id`` is None
    for an enqueued job, and for a schedule's job whose schedule is in another partition (its
    side is recorded there, ``finish``)."""

    entry_id: str
    execution_id: str
    schedule_id: str | None
    attempt: int
    start_by_ms: int  # the latest Redis time (ms) it may start at
    run: str  # its runs log record (runs_log.run_record)
    dedup: bool = False
    limits: tuple[tuple[str, str], ...] = ()  # the limits it holds: released when it expires
    flow: str = ""  # a flow step's job: its flow id, step number, the keys its end may write
    step: int = 0
    flow_keys: tuple[str, ...] = ()


def last_error(error_type: str, message: str) -> str:
    """A run's error as a pause note names it: ``Type: message``, at most LAST_ERROR_MAX
    characters."""
    text = f"{error_type}: {message}" if error_type and message else error_type or message
    return text[:LAST_ERROR_MAX]


class WorkerCalls(scripts.ScriptCaller):
    """The worker's script calls and reads on the queues of one partition."""

    history_limit: int
    dead_letter_max_entries: int
    runs_max_entries: int
    events: EventLog

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
        labels: Sequence[str] = (),
    ) -> list[Code]:
        """Mark schedule jobs running; items (entry id, exec id, schedule id, attempt, extra).
        Returns OK (run it) or SUPERSEDED (already acknowledged, do not run) per item.
        ``labels``: the items' jobs' labels fields, where a superseded job's record is indexed."""
        keys = [self.keys.queue(queue, priority)]
        args: list[Any] = [GROUP, self.history_limit, worker]
        for entry_id, exec_id, sid, attempt, extra in items:
            keys += [self.keys.history(sid), self.keys.schedule(sid)]
            args += [entry_id, exec_id, attempt, extra]
        keys.append(self.keys.runs)  # where a superseded job is recorded as cancelled
        keys += label_index_keys(self.keys, *labels)
        return [Code(int(c)) for c in await self.call("start", keys, args)]

    async def complete(
        self, queue: str, done: Sequence[Done], priority: Priority = "normal"
    ) -> int:
        """Acknowledge finished runs and record their events; returns how many were recorded
        (the others were no longer pending)."""
        keys = [self.keys.queue(queue, priority)]
        items: list[tuple[Any, ...]] = []
        limited = any(d.limits for d in done)
        counted = any(d.counted for d in done)
        flows = any(d.flow for d in done)
        for d in done:
            if d.schedule_id and d.home is None:
                sid = d.schedule_id
                keys += [self.keys.history(sid), self.keys.schedule(sid), self.keys.pending(sid)]
            sid_arg = d.schedule_id if d.schedule_id and d.home is None else ""
            item: tuple[Any, ...] = (
                d.entry_id, d.execution_id, sid_arg, d.attempt, d.event, d.extra
            )  # fmt: skip
            if d.dedup:
                keys.append(self.keys.dedup(d.execution_id))
            if flows:
                item = (*item, 1 if d.dedup else 0, d.run or "", d.limits, 1 if d.counted else 0,
                        d.flow, d.step, d.parent_result)  # fmt: skip
            elif counted:
                item = (*item, 1 if d.dedup else 0, d.run or "", d.limits, 1 if d.counted else 0)
            elif limited:
                item = (*item, 1 if d.dedup else 0, d.run or "", d.limits)
            elif d.run is not None:
                item = (*item, 1 if d.dedup else 0, d.run)
            elif d.dedup:
                item = (*item, 1)
            items.append(item)
        args: list[Any] = [GROUP, self.history_limit, orjson.dumps(items), self.runs_max_entries]
        args.append(len(keys) + 1 if limited else "")
        if limited:
            keys += self.keys.limits
        indexed = [
            key for d in done if d.run and "\n" in d.run for key in run_index_keys(self.keys, d.run)
        ]
        if indexed:
            keys += dict.fromkeys(indexed)
        if flows:
            keys += dict.fromkeys(key for d in done for key in d.flow_keys)
        # The runs log, then the activity counters (ARGV[6] '1': the script counts the batch).
        keys += (self.keys.runs, self.keys.activity)
        args.append("1")
        recorded = int(await self.call("complete", keys, args))
        if recorded < 0:
            check(recorded, script="complete", queue=queue)
        return recorded

    async def expire(
        self, queue: str, items: Sequence[Expiring], priority: Priority = "normal"
    ) -> tuple[int, list[Code]]:
        """Jobs about to start whose start deadline passed by Redis time end ``expired``
        unrun (lua/expire.lua): (the Redis time it decided by, ms; per item OK (run it),
        EXPIRED (recorded, do not run) or NOT_PENDING (expired before, or taken over: do not
        run))."""
        k = self.keys
        keys = [k.queue(queue, priority)]
        rows: list[list[Any]] = []
        limited = any(e.limits for e in items)
        for e in items:
            if e.schedule_id:
                sid = e.schedule_id
                keys += [k.history(sid), k.schedule(sid), k.pending(sid)]
            if e.dedup:
                keys.append(k.dedup(e.execution_id))
            rows.append(
                [e.entry_id, e.execution_id, e.schedule_id or "", e.attempt, e.start_by_ms,
                 1 if e.dedup else 0, e.run, list(e.limits), e.flow, e.step]
            )  # fmt: skip
        args: list[Any] = [GROUP, self.history_limit, self.runs_max_entries, orjson.dumps(rows)]
        args.append(len(keys) + 1 if limited else "")
        if limited:
            keys += k.limits
        indexed = [
            key for e in items if e.run and "\n" in e.run for key in run_index_keys(k, e.run)
        ]
        if indexed:
            keys += dict.fromkeys(indexed)
        keys += dict.fromkeys(key for e in items for key in e.flow_keys)
        keys += (k.runs, k.activity)
        args.append("1")
        res = await self.call("expire", keys, args)
        if not isinstance(res, list):
            check(res, script="expire", queue=queue)
        return int(res[0]), [Code(int(c)) for c in res[1:]]

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
        limits: Sequence[tuple[str, str]] = (),
    ) -> int | None:
        """Schedule the next attempt; returns its due time (ms) or None when not pending.
        ``next_fields`` carry the job's level (its 'priority' field) for the promoter; ``run``
        is the attempt's record for the runs log (runs_log.run_record)."""
        stream = self.keys.queue(queue, priority)
        history = self.keys.history(schedule_id) if schedule_id else stream
        hash_key = self.keys.schedule(schedule_id) if schedule_id else stream
        keys = [stream, self.keys.delayed_queue(queue), history, hash_key, self.keys.runs]
        keys.append(self.keys.activity)
        if limits:
            keys += self.keys.limits
        keys += run_index_keys(self.keys, run)
        res = await self.call(
            "retry",
            keys,
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
                *([orjson.dumps(list(limits)).decode()] if limits else []),
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
        limits: Sequence[tuple[str, str]] = (),
        elsewhere: bool = False,
    ) -> str | None:
        """Move an entry to the dead-letter stream; returns the dead letter's id (None when the
        entry was no longer pending). The stored job names its level, for ``requeue``; ``run``
        is the run's record for the runs log (runs_log.run_record)."""
        sid = raw.get("schedule_id") or ""
        # A job from another partition's schedule (Job.home) has its schedule's side recorded
        # there (finish).
        has_schedule = bool(sid) and NAME_RE.match(sid) is not None and not elsewhere
        # The job says its schedule pauses after failed runs: the script counts this one.
        counted = has_schedule and '"pause_after_failures"' in raw.get("opts", "")
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
        keys += [k.dedup(exec_id) if has_dedup else stream, k.runs, k.activity]
        if limits:
            keys += k.limits
        keys += run_index_keys(k, run)
        keys += step_keys(k, raw)
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
        if raw.get("flow"):  # dead.lua records the step's end in its flow
            fields += ["flow", raw["flow"], "step", raw.get("step", "0")]
        res = await self.call(
            "dead",
            keys,
            [
                GROUP,
                entry_id,
                self.dead_letter_max_entries,
                self.history_limit,
                ("2" if counted else "1") if has_schedule else "0",
                raw.get("execution_id", ""),
                raw.get("attempt", "1"),
                first_event,
                extra,
                self.runs_max_entries,
                run,
                *([orjson.dumps(list(limits)).decode()] if limits else []),
                *([last_error(error_type, error_message)] if counted else []),
                *fields,
            ],
        )
        if check(res, script="dead", queue=queue) == Code.NOT_PENDING:
            return None
        if len(res) > 2:
            await self._paused(sid, int(res[2]), last_error(error_type, error_message))
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

    async def finish(
        self,
        queue: str,
        priority: Priority,
        schedule_id: str,
        *,
        execution_id: str,
        attempt: int,
        event: str,
        extra: str,
        over: bool,
        counted: bool = False,
        error: str = "",
    ) -> None:
        """The schedule's side of a run whose job ran from another partition's stream: its
        history event, and the end of the run when ``over`` (lua/finish.lua); ``counted``: the
        job says its schedule pauses after failed runs (``error``: the run's, for the note)."""
        k = self.keys
        keys = [k.queue(queue, priority), k.history(schedule_id), k.schedule(schedule_id),
                k.pending(schedule_id)]  # fmt: skip
        args: list[Any] = [
            self.history_limit, execution_id, attempt, event, extra, "1" if over else "0"
        ]  # fmt: skip
        if counted:
            args += ["1", error[:LAST_ERROR_MAX]]
        res = await self.call("finish", keys, args)
        check(res, script="finish", schedule_id=schedule_id)
        if isinstance(res, list) and len(res) > 1:
            await self._paused(schedule_id, int(res[1]), error[:LAST_ERROR_MAX])

    async def _paused(self, schedule_id: str, failures: int, error: str) -> None:
        """A schedule paused itself after ``failures`` runs in a row failed (the script that
        counted the last one did it): announced after the script, best effort, as dead letters
        are."""
        log.warning("schedule.auto_paused", schedule_id=schedule_id, failures=failures, error=error)
        if METRICS.on:
            METRICS.auto_paused.inc()
        await self.events.publish(
            "schedule_paused", schedule_id=schedule_id, failures=failures, error=error
        )

    async def drop(self, queue: str, priority: Priority, entry_ids: Sequence[str]) -> int:
        """Acknowledge and delete entries that must not run (lua/forwarded.lua)."""
        res = await self.call("forwarded", [self.keys.queue(queue, priority)], [GROUP, *entry_ids])
        return int(res)

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
            keys += [self.keys.delayed_queue(queue), *self.keys.streams(queue)]
        res = await self.call("promote", keys, [limit])
        if int(res[0]) < 0:
            check(res, script="promote", queue=",".join(queues))
        wait = int(res[1])
        return int(res[0]), (wait if wait >= 0 else None)

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

    async def store_results(self, results: Sequence[tuple[str, bytes]], ttl_ms: int) -> None:
        """Keep handlers' return values (execution id, JSON) for ``ttl_ms`` (SET: idempotent)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for execution_id, body in results:
                pipe.set(self.keys.result(execution_id), body, px=ttl_ms)
            await pipe.execute()
