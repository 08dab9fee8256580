"""The actors of a running worker (see rsched._worker.worker for the whole picture).

- reader: XREADGROUP on the worker's queues, as many entries as there are free slots; each
  queue is a stream per priority level, and a busy read starts from the level whose weighted
  turn it is (LevelTurns); in a deployment of several partitions, each busy read starts from
  the next partition (each partition's streams are read by one take.lua call), and an idle
  worker blocks in one XREADGROUP per partition (watchers);
- runners: ``concurrency`` tasks taking jobs from the reader (async handlers in the loop,
  plain functions in worker threads), each job under its timeout and its own cancel scope;
- acker: records finished runs in batches (one script call acknowledges many entries);
- reclaimer, promoter and cancel listener;
- registry: every heartbeat period, the heartbeat of the entries of running jobs, then the
  worker's record in the worker registry (who it is, what it runs): one script call each.

They share one :class:`Slots` (the concurrency limit) and the worker's bookkeeping of the
entries it holds; everything runs on one event loop, so no lock is needed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import socket
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import orjson
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from redis.exceptions import RedisError, ResponseError

from rsched._core.backoff import Backoff
from rsched._core.codes import Code
from rsched._core.errors import MalformedJob, Retry, StateError
from rsched._core.history import fragment
from rsched._core.job import Entry, Job, Lane, parse_entry, retry_delay_s
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS
from rsched._core.rules import PRIORITIES, Priority
from rsched._core.settings import Settings
from rsched._core.workers import worker_record
from rsched._redis.cluster import subscribed
from rsched._redis.connection import messages
from rsched._store.queues import QueueStore
from rsched._store.runs_log import run_record
from rsched._store.worker_calls import Done

log = get_logger("rsched.worker")
# The per-job lines (job.start, job.end) under their own name, so that a busy deployment can
# quiet them (logging.getLogger("rsched.worker.jobs").setLevel("WARNING")) and keep the rest.
jobs_log = get_logger("rsched.worker.jobs")

# What an actor survives (logs, backs off, carries on): Redis unreachable or refusing, a key
# someone overwrote with the wrong type, bytes that are not UTF-8 in an entry.
ACTOR_FAILURES = (RedisError, OSError, StateError, UnicodeDecodeError)

ACK_BATCH = 1_000
# Most delayed jobs one promote call moves (a call that moved this many is followed by another).
PROMOTE_BATCH = 1_000
CONSUMER_IDLE_FORGET_MS = 3_600_000
MAX_RETRY_DELAY_S = 365 * 86_400.0
# A registry record lives this many heartbeats: a worker that misses them is gone.
REGISTRY_HEARTBEATS = 3
# Registry ids not seen for this long are pruned (their records expired long before).
REGISTRY_PRUNE_MS = 3_600_000
# Running jobs listed in a registry record (the count is always exact).
REGISTRY_MAX_JOBS = 1_000
# A job whose task this worker lacks goes back to its delayed set for this long while another
# live worker has the task (it is taken from there by any reader), else while the grace lasts.
UNKNOWN_TASK_RETRY_MS = 1_000
UNKNOWN_TASK_WAIT_MS = 5_000
# How long the tasks of live workers are trusted before the registry is read again.
LIVE_TASKS_TTL_S = 2.0
# The idle time a handed-back entry gets: past any visibility timeout (and below Redis's
# clock, which XCLAIM IDLE needs), so the next reclaim takes it at once.
HAND_BACK_IDLE_MS = 10 * 365 * 86_400_000

#: One stream of a deployment: (partition, queue, level); and one entry of it a worker holds.
Stream = tuple[int, str, Priority]
Held = tuple[int, str, Priority, str]


class LevelTurns:
    """Which priority level a busy read starts from: smooth weighted round-robin (nginx's), so
    that over ``sum(weights)`` reads each level leads ``weight`` of them, evenly spread. The
    other levels follow by weight: a level with nothing waiting passes its turn on, so high
    takes the reads of an empty normal level, and low, leading one read in ten by default,
    never starves."""

    def __init__(self, weights: Mapping[str, int]) -> None:
        self.weights = {level: max(1, int(weights.get(level, 1))) for level in PRIORITIES}
        self.total = sum(self.weights.values())
        self.current = dict.fromkeys(PRIORITIES, 0)
        # Followers by weight, ties in PRIORITIES order (high first).
        self.by_weight = sorted(PRIORITIES, key=lambda lv: -self.weights[lv])

    def next(self) -> list[Priority]:
        for level in PRIORITIES:
            self.current[level] += self.weights[level]
        head = max(PRIORITIES, key=lambda lv: self.current[lv])
        self.current[head] -= self.total
        return [head, *(lv for lv in self.by_weight if lv != head)]


@dataclass(slots=True)
class Running:
    job: Job
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    cancel_requested: bool = False
    cancel_reason: str = "cancel_previous"
    started: float = 0.0  # time.perf_counter() at the handler's start (no clock read per job)


class Slots:
    """The concurrency limit: a job holds one slot from its read until its handler ends.

    The reader reserves free slots before a blocking read (and keeps what it used); the
    reclaimer may claim up to the slots no job holds, even while the reader waits with a
    reservation, so reclaiming never starves behind an idle blocking read.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self.reserved = 0
        self._changed = anyio.Event()

    async def reserve(self, most: int) -> int:
        """Wait for a free slot, then reserve up to ``most``."""
        while self.total - self.used - self.reserved <= 0:
            self._changed = anyio.Event()
            await self._changed.wait()
        # Let the jobs that are ready finish first: one large read instead of many small ones.
        await anyio.lowlevel.checkpoint()
        n = min(most, self.total - self.used - self.reserved)
        if n <= 0:
            return await self.reserve(most)
        self.reserved += n
        return n

    def commit(self, reserved: int, used: int) -> None:
        """End a reservation of ``reserved`` slots of which ``used`` now hold jobs."""
        self.reserved -= reserved
        self.used += used
        if used < reserved:
            self._changed.set()

    async def wait_free(self) -> None:
        """Wait until a slot is neither used nor reserved (reserving none)."""
        while self.total - self.used - self.reserved <= 0:
            self._changed = anyio.Event()
            await self._changed.wait()

    def idle(self) -> int:
        """Slots no job holds (the reclaimer's budget)."""
        return max(0, self.total - self.used)

    def take(self, n: int) -> None:
        self.used += n

    def release(self, n: int = 1) -> None:
        self.used -= n
        self._changed.set()


class Actors:
    """The actors of one run of a worker (they share the stores, the slots and the acker)."""

    def __init__(
        self,
        handlers: Mapping[str, tuple[Callable[[Job], Any], bool]],
        consumer: str,
        stores: Sequence[QueueStore],
        settings: Settings,
        acks: MemoryObjectSendStream[tuple[Stream, Done]],
        jobs: MemoryObjectSendStream[Job],
    ) -> None:
        self.handlers = handlers
        self.consumer = consumer
        # One store per partition; partition 0's also serves the deployment's keys (registry,
        # cancel channel).
        self.stores = list(stores)
        self.store = self.stores[0]
        self.settings = settings
        self.cfg = settings.worker
        self.slots = Slots(self.cfg.concurrency)
        self.threads = anyio.CapacityLimiter(self.cfg.concurrency)
        self.acks = acks
        self.jobs = jobs
        # (partition, queue, level, entry id) of every entry read and not yet acknowledged (ids
        # are per stream, and each level of a queue in each partition is a stream): the
        # heartbeat keeps these fresh.
        self.inflight: set[Held] = set()
        self.turns = LevelTurns(self.cfg.priority_weights)
        self.running: dict[str, Running] = {}  # execution id -> its run (cancel_previous)
        self.promote_wake = anyio.Event()
        self.completed = 0
        self.failed = 0
        self.retried = 0  # attempts whose handler raised Retry (not failures)
        # Entries of jobs cancelled by a forced stop (no outcome): handed back on the way out.
        self.abandoned: set[Held] = set()
        # Set while the reader of a deployment of several partitions found nothing: the
        # watchers block on their partitions then, and set found when one got an entry (or
        # failed: the reader then looks itself).
        self._idle = anyio.Event()
        self._found = anyio.Event()
        self.started_ms = time.time_ns() // 1_000_000
        self._live_tasks: tuple[float, set[str]] = (-math.inf, set())

    # --- reader ------------------------------------------------------------------------------

    async def reader(self) -> None:
        backoff = Backoff()
        queues = list(self.cfg.queues)
        every: list[Lane] = [(q, level) for level in PRIORITIES for q in queues]
        partitions = len(self.stores)
        # Start with a take: a blocking read returns an entry of every stream that has one, past
        # the free slots and regardless of level; it only follows a take that found nothing.
        busy = True
        turn = lead = 0
        async with anyio.create_task_group() as watchers:
            if partitions > 1:
                for partition in range(partitions):
                    watchers.start_soon(self._watch, partition, every)
            while True:
                if not busy and partitions > 1:
                    await self._wait_found()
                    busy = True
                n = await self.slots.reserve(self.cfg.read_batch)
                try:
                    if busy:
                        # Work is waiting: take it without blocking, in one JSON reply per
                        # partition, from the level whose turn it is (LevelTurns) then the
                        # others, and within a level from a different queue each time, so that
                        # none starves.
                        turn = (turn + 1) % len(queues)
                        order = queues[turn:] + queues[:turn]
                        lanes = [(q, level) for level in self.turns.next() for q in order]
                        if partitions == 1:
                            got = _of(0, await self.store.take(lanes, self.consumer, n))
                        else:
                            lead = (lead + 1) % partitions
                            got = await self._take_partitions(lanes, n, lead)
                    else:
                        # Idle: block until anything arrives (one entry per stream wakes us;
                        # the rest follow through take()).
                        read = await self.store.read(every, self.consumer, 1, self.cfg.block_ms)
                        got = _of(0, read)
                    busy = bool(got)
                except ResponseError as exc:
                    self.slots.commit(n, 0)
                    await self._read_refused(exc, backoff)
                    continue
                except ACTOR_FAILURES as exc:
                    self.slots.commit(n, 0)
                    await _back_off(backoff, "reader", exc)
                    continue
                except BaseException:
                    self.slots.commit(n, 0)
                    raise
                backoff.reset()
                self.slots.commit(n, sum(len(entries) for _, _, entries in got))
                for partition, lane, entries in got:
                    await self.dispatch(lane, [(eid, f, 1) for eid, f in entries], partition)

    async def _take_partitions(
        self, lanes: list[Lane], n: int, lead: int
    ) -> list[tuple[int, Lane, list[Entry]]]:
        """Up to ``n`` entries from the partitions in turn, starting with ``lead`` (each busy
        read starts with the next one, so no partition starves behind a busier one)."""
        got: list[tuple[int, Lane, list[Entry]]] = []
        partitions = len(self.stores)
        for step in range(partitions):
            partition = (lead + step) % partitions
            found = _of(partition, await self.stores[partition].take(lanes, self.consumer, n))
            got += found
            n -= sum(len(entries) for _, _, entries in found)
            if n <= 0:
                break
        return got

    async def _wait_found(self) -> None:
        """Idle with several partitions: let the watchers block, until one found an entry or
        failed (then the reader looks itself, in case that watcher backs off for a while).
        Without a failure the reader never polls: the watchers' reads cover every stream."""
        self._found = anyio.Event()
        self._idle.set()
        await self._found.wait()
        self._idle = anyio.Event()

    async def _watch(self, partition: int, every: list[Lane]) -> None:
        """While the reader is idle, block in XREADGROUP on one partition's streams (a read
        covers one partition: one slot of a cluster), then hand what came to the runners and
        wake the reader. It waits for a free slot but reserves none, so the reader's takes
        never wait behind a watcher's block; several watchers waking at once may read one
        entry per stream past the free slots, which wait for a runner."""
        store = self.stores[partition]
        backoff = Backoff()
        while True:
            await self._idle.wait()
            await self.slots.wait_free()
            try:
                got = await store.read(every, self.consumer, 1, self.cfg.block_ms)
            except ResponseError as exc:
                self._found.set()
                await self._read_refused(exc, backoff)
                continue
            except ACTOR_FAILURES as exc:
                self._found.set()
                await _back_off(backoff, "reader", exc)
                continue
            backoff.reset()
            if got:
                self.slots.take(sum(len(entries) for _, entries in got))
                for lane, entries in got:
                    await self.dispatch(lane, [(eid, f, 1) for eid, f in entries], partition)
                self._found.set()

    async def _read_refused(self, exc: ResponseError, backoff: Backoff) -> None:
        if "NOGROUP" in str(exc):  # the server lost its data (restart without AOF)
            log.warning("queue.group_missing", queues=",".join(self.cfg.queues))
            await self._recreate_groups(backoff)
            return
        delay = backoff.next()
        log.error("redis.error", actor="reader", error=str(exc), retry_s=round(delay, 2))
        await anyio.sleep(delay)

    async def _recreate_groups(self, backoff: Backoff) -> None:
        while True:
            try:
                for store in self.stores:
                    await store.create_groups(self.cfg.queues)
                return
            except ACTOR_FAILURES as exc:
                await _back_off(backoff, "reader", exc)

    async def dispatch(
        self, lane: Lane, entries: list[tuple[str, dict[str, str], int]], partition: int = 0
    ) -> None:
        """Start the jobs of entries of one stream of ``partition`` that each hold one slot
        (released here when not run)."""
        queue, level = lane
        stream = (partition, queue, level)
        jobs: list[Job] = []
        for entry_id, fields, deliveries in entries:
            if fields is None or ("malformed" in fields and "task" not in fields):
                raw = fields or {}
                await self._refuse(stream, entry_id, raw, "malformed", "entry has no job fields")
                continue
            try:
                job = parse_entry(queue, entry_id, fields, deliveries, level, partition)
            except MalformedJob as exc:
                await self._refuse(stream, entry_id, fields, "malformed", str(exc))
                continue
            if job.task not in self.handlers:
                await self._unknown_task(job, fields)
                continue
            jobs.append(job)
        if not jobs:
            return
        scheduled = [j for j in jobs if j.schedule_id]
        if scheduled:
            superseded = await self._start_scheduled(stream, scheduled)
            if superseded:
                jobs = [j for j in jobs if j.entry_id not in superseded]
        for job in jobs:
            self.inflight.add((partition, queue, level, job.entry_id))
            self.jobs.send_nowait(job)

    async def _start_scheduled(self, stream: Stream, jobs: list[Job]) -> set[str]:
        items = [
            (
                j.entry_id,
                j.execution_id,
                j.schedule_id or "",
                j.attempt,
                fragment({"worker": self.consumer, "deliveries": j.deliveries}),
            )
            for j in jobs
        ]
        try:
            partition, queue, level = stream
            codes = await self.stores[partition].start(queue, self.consumer, items, level)
        except ACTOR_FAILURES as exc:
            # Run them anyway: the marker and history are bookkeeping; the job must not wait.
            log.warning("redis.error", actor="start", error=str(exc))
            return set()
        superseded: set[str] = set()
        for job, code in zip(jobs, codes, strict=True):
            if code == Code.SUPERSEDED:
                superseded.add(job.entry_id)
                self.slots.release()
                log.info(
                    "job.cancelled",
                    execution_id=job.execution_id,
                    task=job.task,
                    attempt=job.attempt,
                    reason="superseded",
                )
        return superseded

    async def _unknown_task(self, job: Job, fields: dict[str, str]) -> None:
        """A job whose task this worker has no handler for: while another live worker has the
        task, or for ``unknown_task_grace_s`` from its first sighting (a rolling deploy that
        adds the task), it goes back to the delayed set; after that it is dead-lettered."""
        now = time.time_ns() // 1_000_000
        try:
            first = int(fields.get("unknown_since") or now)
        except ValueError:
            first = now
        grace_ms = round(self.cfg.unknown_task_grace_s * 1000)
        known = job.task in await self._tasks_of_live_workers()
        if not known and now - first >= grace_ms:
            waited = f" (waited {fmt_s(now - first)} for a worker that has it)" if grace_ms else ""
            await self._refuse(
                (job.partition, job.queue, job.priority),
                job.entry_id,
                fields,
                "unknown_task",
                f"no handler registered for task {job.task!r} on worker {self.consumer} "
                f"nor on any live worker{waited}",
            )
            return
        self.slots.release()
        delay_ms = (
            UNKNOWN_TASK_RETRY_MS if known else min(UNKNOWN_TASK_WAIT_MS, first + grace_ms - now)
        )
        nxt = {**fields, "unknown_since": str(first)}
        if job.priority != "normal":  # back into its level's stream (lua/promote.lua)
            nxt["priority"] = job.priority
        first_sighting = "unknown_since" not in fields
        if first_sighting:
            log.warning(
                "job.unknown_task",
                execution_id=job.execution_id,
                task=job.task,
                queue=job.queue,
                action="wait",
                live_worker_has_it=known,
                grace_s=self.cfg.unknown_task_grace_s,
            )
        try:
            await self.stores[job.partition].retry(
                job.queue,
                job.entry_id,
                next_fields=[v for pair in nxt.items() for v in pair],
                delay_ms=max(0, delay_ms),
                execution_id=job.execution_id,
                # Recorded once on the schedule's history, not at every look.
                schedule_id=job.schedule_id if first_sighting else None,
                attempt=job.attempt,
                event="waiting",
                extra=fragment({"reason": "unknown_task", "task": job.task}),
                priority=job.priority,
            )
        except ACTOR_FAILURES as exc:  # left pending: reclaimed and judged again later
            log.warning("redis.error", actor="reader", error=str(exc))

    async def _tasks_of_live_workers(self) -> set[str]:
        """Every task some live worker (this one included) has registered, cached briefly."""
        read_at, tasks = self._live_tasks
        if time.monotonic() - read_at < LIVE_TASKS_TTL_S:
            return tasks
        try:
            workers = await self.store.workers()
        except ACTOR_FAILURES as exc:
            log.warning("redis.error", actor="registry", error=str(exc))
            return tasks
        tasks = {t for w in workers for t in w.tasks} | set(self.handlers)
        self._live_tasks = (time.monotonic(), tasks)
        return tasks

    async def _refuse(
        self, stream: Stream, entry_id: str, raw: dict[str, str], reason: str, message: str
    ) -> None:
        """Dead-letter an entry this worker cannot run (malformed, or no handler)."""
        await self._bury(
            stream,
            entry_id,
            raw,
            reason=reason,
            error_type="MalformedJob" if reason == "malformed" else "UnknownTask",
            message=message,
            extra={"reason": reason, "worker": self.consumer},
            actor="dead",
        )

    async def _bury(
        self,
        stream: Stream,
        entry_id: str,
        raw: dict[str, str],
        *,
        reason: str,
        error_type: str,
        message: str,
        extra: dict[str, Any],
        actor: str,
        deliveries: int = 1,
    ) -> None:
        """Dead-letter an entry that holds a slot without running (the slot is freed here)."""
        partition, queue, level = stream
        self.slots.release()
        log.error(
            "job.dead",
            entry_id=entry_id,
            queue=queue,
            execution_id=raw.get("execution_id", ""),
            task=raw.get("task", ""),
            reason=reason,
            error=message,
        )
        try:
            await self.stores[partition].dead(
                queue,
                entry_id,
                raw=raw,
                reason=reason,
                error_type=error_type,
                error_message=message,
                deliveries=deliveries,
                worker=self.consumer,
                extra=fragment(extra),
                priority=level,
                run=run_record(
                    raw,
                    queue=queue,
                    status="dead",
                    worker=self.consumer,
                    error_type=error_type,
                    error=message,
                ),
            )
        except ACTOR_FAILURES as exc:  # left pending: reclaimed and judged again later
            log.warning("redis.error", actor=actor, error=str(exc))

    # --- runners -----------------------------------------------------------------------------

    async def runner(self, inbox: MemoryObjectReceiveStream[Job]) -> None:
        async with inbox:
            async for job in inbox:
                await self.run_job(job)

    async def run_job(self, job: Job) -> None:
        fn, is_async = self.handlers[job.task]
        run = Running(job)
        self.running[job.execution_id] = run
        jobs_log.info(
            "job.start",
            execution_id=job.execution_id,
            task=job.task,
            attempt=job.attempt,
            queue=job.queue,
        )
        if METRICS.on:
            METRICS.job_started(job)
        started = run.started = time.perf_counter()
        error: BaseException | None = None
        timed_out = False
        value: Any = None
        # One scope serves both the job's timeout (its deadline) and cancel_previous (cancel());
        # run.cancel_requested tells them apart.
        run.scope.deadline = anyio.current_time() + job.timeout_s
        if not is_async:
            job = dataclasses.replace(job, stop_event=threading.Event())
        try:
            with run.scope:
                if is_async:
                    value = await fn(job)
                else:
                    value = await anyio.to_thread.run_sync(
                        fn, job, abandon_on_cancel=True, limiter=self.threads
                    )
            timed_out = run.scope.cancelled_caught and not run.cancel_requested
        except Exception as exc:
            error = exc
        except BaseException:
            # Cancelled by shutdown: no outcome, the entry stays pending for another worker
            # (handed back at once when the stop was forced: see hand_back).
            held = (job.partition, job.queue, job.priority, job.entry_id)
            self.inflight.discard(held)
            self.abandoned.add(held)
            raise
        finally:
            self.running.pop(job.execution_id, None)
            self.slots.release()
            if METRICS.on:
                METRICS.running -= 1
            if job.stop_event is not None:  # a thread still running is told to stop
                job.stop_event.set()
        duration_ms = round((time.perf_counter() - started) * 1000, 1)
        if METRICS.on:
            cancelled = run.cancel_requested
            METRICS.job_ended(
                job, duration_ms / 1000, cancelled=cancelled, timed_out=timed_out, error=error
            )
        if run.cancel_requested:
            await self._finish(job, "cancelled", duration_ms, {"reason": run.cancel_reason})
        elif timed_out:
            await self._fail(job, duration_ms, None, timed_out=True)
        elif error is not None:
            await self._fail(job, duration_ms, error)
        else:
            await self._finish(job, "completed", duration_ms, {}, self._result(job, value))

    def _result(self, job: Job, value: Any) -> bytes | None:
        """The JSON of a handler's return value to keep, or None (None returned, too large,
        or not JSON: both logged)."""
        if value is None:
            return None
        try:
            body = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
        except TypeError as exc:
            log.warning("job.result_dropped", execution_id=job.execution_id, error=str(exc))
            return None
        if len(body) > self.cfg.result_max_bytes:
            log.warning(
                "job.result_dropped",
                execution_id=job.execution_id,
                error=f"{len(body)} bytes of JSON, more than result_max_bytes="
                f"{self.cfg.result_max_bytes}",
            )
            return None
        return body

    async def _finish(
        self,
        job: Job,
        event: str,
        duration_ms: float,
        extra: dict[str, Any],
        result: bytes | None = None,
    ) -> None:
        _log_end(jobs_log.info, job, event, duration_ms=duration_ms)
        self.completed += event == "completed"
        item = (
            (job.partition, job.queue, job.priority),
            Done(
                job.entry_id,
                job.execution_id,
                job.schedule_id,
                job.attempt,
                event,
                fragment({"duration_ms": duration_ms, **extra}) if job.schedule_id else "",
                "dedup" in job.fields,
                result,
                run=run_record(
                    job.fields,
                    queue=job.queue,
                    status=event,
                    worker=self.consumer,
                    duration_ms=duration_ms,
                    error_type=str(extra.get("reason", "")),  # why it was cancelled
                ),
            ),
        )
        try:
            self.acks.send_nowait(item)  # no checkpoint per job on the hot path
        except anyio.WouldBlock:
            await self.acks.send(item)

    async def _fail(
        self, job: Job, duration_ms: float, error: BaseException | None, *, timed_out: bool = False
    ) -> None:
        """A run that did not complete: it failed, timed out, or its handler raised
        :class:`Retry` (an outcome of its own, not a failure, but an attempt all the same: past
        ``max_retries`` the job is dead-lettered, as in Celery and arq)."""
        asked = isinstance(error, Retry)
        extra: dict[str, Any]
        if timed_out:
            error_type, message, tb = "TimeoutError", f"timed out after {job.timeout_s}s", ""
        elif asked:
            error_type, message, tb = "Retry", str(error), ""
        else:
            assert error is not None
            error_type, message = type(error).__name__, str(error)
            tb = "".join(traceback.format_exception(error))[-self.cfg.traceback_max_chars :]
        event = "timed_out" if timed_out else "retry" if asked else "failed"
        if job.is_last_attempt:
            self.failed += 1
            reason = "timeout" if timed_out else "max_retries"
            if asked:
                message = (
                    f"retries exhausted: the handler asked for another attempt after attempt "
                    f"{job.attempt} of {job.max_retries + 1} (max_retries={job.max_retries})"
                    + (f": {message}" if message else "")
                )
            extra = {"duration_ms": duration_ms, "error_type": error_type, "error": message[:500]}
            _log_end(
                jobs_log.error,
                job,
                "dead",
                reason=reason,
                duration_ms=duration_ms,
                error_type=error_type,
                error=message,
            )
            await self._record(
                job,
                lambda: self.stores[job.partition].dead(
                    job.queue,
                    job.entry_id,
                    raw=dict(job.fields),
                    reason=reason,
                    error_type=error_type,
                    error_message=message,
                    traceback=tb,
                    deliveries=job.deliveries,
                    worker=self.consumer,
                    first_event="timed_out" if timed_out else "",
                    extra=fragment({**extra, "reason": reason}),
                    priority=job.priority,
                    run=run_record(
                        job.fields,
                        queue=job.queue,
                        status="dead",
                        worker=self.consumer,
                        duration_ms=duration_ms,
                        error_type=error_type,
                        error=message,
                    ),
                ),
            )
            return
        requested = error.delay_s if isinstance(error, Retry) else None
        if isinstance(requested, int | float) and not math.isnan(requested):
            delay_s = min(max(float(requested), 0.0), MAX_RETRY_DELAY_S)
        else:
            delay_s = retry_delay_s(job.options, job.attempt)
        delay_ms = round(delay_s * 1000)
        if asked:
            assert isinstance(error, Retry)
            self.retried += 1
            extra = {"duration_ms": duration_ms}
            if error.reason:
                extra["reason"] = error.reason[:500]
            _log_end(
                jobs_log.info,
                job,
                event,
                duration_ms=duration_ms,
                retry_in_ms=delay_ms,
                **({"reason": error.reason} if error.reason else {}),
            )
        else:
            self.failed += 1
            extra = {"duration_ms": duration_ms, "error_type": error_type, "error": message[:500]}
            _log_end(
                jobs_log.warning,
                job,
                event,
                duration_ms=duration_ms,
                retry_in_ms=delay_ms,
                error_type=error_type,
                error=message,
            )
        await self._record(
            job,
            lambda: self.stores[job.partition].retry(
                job.queue,
                job.entry_id,
                next_fields=job.next_attempt_fields(),
                delay_ms=delay_ms,
                execution_id=job.execution_id,
                schedule_id=job.schedule_id,
                attempt=job.attempt,
                event=event,
                extra=fragment(extra),
                priority=job.priority,
                run=run_record(
                    job.fields,
                    queue=job.queue,
                    status=event,
                    worker=self.consumer,
                    duration_ms=duration_ms,
                    error_type="" if asked else error_type,
                    error=str(extra.get("reason", "")) if asked else message,
                ),
            ),
        )
        if delay_ms < self.cfg.promote_interval_ms:
            self.promote_wake.set()

    async def _record(self, job: Job, call: Callable[[], Awaitable[Any]]) -> None:
        """Run a recording script until Redis takes it (the entry stays pending meanwhile)."""
        try:
            refused = await _until_taken(call, "runner")
            if refused is not None:
                log.error("job.unrecorded", execution_id=job.execution_id, error=str(refused))
        finally:
            self.inflight.discard((job.partition, job.queue, job.priority, job.entry_id))

    # --- acker -------------------------------------------------------------------------------

    async def acker(
        self, inbox: MemoryObjectReceiveStream[tuple[Stream, Done]], done: anyio.Event
    ) -> None:
        try:
            async with inbox:
                async for first in inbox:
                    batch = [first]
                    while len(batch) < ACK_BATCH:
                        try:
                            batch.append(inbox.receive_nowait())
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                    await self._ack(batch)
        finally:
            done.set()

    async def _ack(self, batch: list[tuple[Stream, Done]]) -> None:
        by_stream: dict[Stream, list[Done]] = {}
        results: dict[int, list[tuple[str, bytes]]] = {}
        for stream, item in batch:
            by_stream.setdefault(stream, []).append(item)
            if item.result is not None:
                results.setdefault(stream[0], []).append((item.execution_id, item.result))
        ttl_ms = round(self.cfg.result_ttl_s * 1000)
        for partition, kept in results.items():  # before the ack: a completed job has its result
            refused = await _until_taken(
                functools.partial(self.stores[partition].store_results, kept, ttl_ms), "acker"
            )
            if refused is not None:
                log.error("job.results_unrecorded", jobs=len(kept), error=str(refused))
        for (partition, queue, level), items in by_stream.items():
            refused = await _until_taken(
                functools.partial(self.stores[partition].complete, queue, items, level), "acker"
            )
            if refused is not None:
                log.error("queue.unrecorded", queue=queue, jobs=len(items), error=str(refused))
            for item in items:
                self.inflight.discard((partition, queue, level, item.entry_id))

    # --- heartbeat ---------------------------------------------------------------------------

    async def heartbeat(self) -> None:
        """Refresh the entries of the jobs this worker holds, once (the registry actor calls
        it every ``heartbeat_s``)."""
        for (partition, queue, level), ids in _by_stream(self.inflight).items():
            for start in range(0, len(ids), 1000):
                try:
                    lost = await self.stores[partition].heartbeat(
                        queue, self.consumer, ids[start : start + 1000], level
                    )
                except ACTOR_FAILURES as exc:
                    log.warning("redis.error", actor="heartbeat", error=str(exc))
                    break
                for entry_id in lost:
                    if (partition, queue, level, entry_id) in self.inflight:
                        log.warning("job.lost", entry_id=entry_id, queue=queue)

    # --- reclaimer ---------------------------------------------------------------------------

    async def reclaimer(self) -> None:
        """Every ``reclaim_interval_s``, take over the entries of the worker's streams idle past
        the visibility timeout (a dead worker's): one call per partition for all its streams,
        as many as there are idle slots."""
        partitions = len(self.stores)
        lanes: list[Lane] = [(q, level) for level in PRIORITIES for q in self.cfg.queues]
        cursors = [dict.fromkeys(lanes, "0-0") for _ in range(partitions)]
        visibility_ms = math.ceil(self.cfg.visibility_timeout_s * 1000)
        rounds = 0
        while True:
            await anyio.sleep(self.cfg.reclaim_interval_s)
            rounds += 1
            # Each round starts with the next partition: a budget of idle slots used up by one
            # partition's stalled entries leaves the others their turn in the next rounds.
            for step in range(partitions):
                partition = (rounds + step) % partitions
                n = min(self.slots.idle(), self.cfg.read_batch)
                if n == 0:
                    break
                at = cursors[partition]
                try:
                    found = await self.stores[partition].reclaim(
                        [(lane, at[lane]) for lane in lanes], self.consumer, visibility_ms, n
                    )
                except ACTOR_FAILURES as exc:
                    log.warning("redis.error", actor="reclaimer", error=str(exc))
                    continue
                for lane, (cursor, claimed) in zip(lanes, found, strict=True):
                    at[lane] = cursor
                    if claimed:
                        await self._reclaimed((partition, *lane), claimed)
            if rounds % 100 == 1:
                await self._forget_consumers()

    async def _reclaimed(
        self, stream: Stream, claimed: list[tuple[str, dict[str, str], int]]
    ) -> None:
        """Run the entries the reclaimer took over from one stream (or bury the poison)."""
        partition, queue, level = stream
        fresh = [c for c in claimed if (partition, queue, level, c[0]) not in self.inflight]
        self.slots.take(len(fresh))
        if METRICS.on and fresh:
            METRICS.reclaims.labels(queue).inc(len(fresh))
        runnable = []
        for entry_id, fields, deliveries in fresh:
            log.warning(
                "job.reclaimed",
                entry_id=entry_id,
                queue=queue,
                execution_id=fields.get("execution_id", ""),
                deliveries=deliveries,
            )
            if deliveries > self.cfg.max_deliveries:
                await self._poison(stream, entry_id, fields, deliveries)
            else:
                runnable.append((entry_id, fields, deliveries))
        if runnable:
            await self.dispatch((queue, level), runnable, partition)

    async def _poison(
        self, stream: Stream, entry_id: str, fields: dict[str, str], deliveries: int
    ) -> None:
        message = (
            f"delivered {deliveries} times (more than max_deliveries={self.cfg.max_deliveries}); "
            "it keeps crashing or stalling its workers"
        )
        await self._bury(
            stream,
            entry_id,
            fields,
            reason="poison",
            error_type="Poison",
            message=message,
            extra={"reason": "poison", "deliveries": deliveries},
            actor="reclaimer",
            deliveries=deliveries,
        )

    async def _forget_consumers(self) -> None:
        """Remove consumers of dead workers once they hold nothing (keeps XINFO readable)."""
        try:
            for store in self.stores:
                await store.forget_consumers(
                    self.cfg.queues, keep=self.consumer, idle_ms=CONSUMER_IDLE_FORGET_MS
                )
        except ACTOR_FAILURES as exc:
            log.warning("redis.error", actor="reclaimer", error=str(exc))

    # --- promoter ----------------------------------------------------------------------------

    async def promoter(self) -> None:
        """Move due delayed jobs (retries, delayed enqueues) into their streams: one call per
        partition for all the worker's queues, then sleep until the next is due, at most
        ``promote_interval_ms`` (others add delayed jobs without telling this worker), or until
        this worker schedules a retry due sooner (promote_wake). A partition that fails is
        left alone for its backoff; the others go on."""
        partitions = len(self.stores)
        backoffs = [Backoff() for _ in range(partitions)]
        retry_at = [0.0] * partitions  # anyio.current_time() a failed partition is tried again
        interval_s = self.cfg.promote_interval_ms / 1000
        queues = list(self.cfg.queues)
        while True:
            # Replaced before the round: a retry scheduled while it runs wakes the next one.
            wake = self.promote_wake = anyio.Event()
            wait_s = interval_s
            for partition, store in enumerate(self.stores):
                left_s = retry_at[partition] - anyio.current_time()
                if left_s > 0:
                    wait_s = min(wait_s, left_s)
                    continue
                try:
                    while True:
                        moved, next_ms = await store.promote(queues, PROMOTE_BATCH)
                        if moved < PROMOTE_BATCH:
                            break
                except ACTOR_FAILURES as exc:
                    delay = backoffs[partition].next()
                    retry_at[partition] = anyio.current_time() + delay
                    wait_s = min(wait_s, delay)
                    log.warning(
                        "redis.error", actor="promoter", error=str(exc), retry_s=round(delay, 2)
                    )
                    continue
                backoffs[partition].reset()
                if next_ms is not None:
                    wait_s = min(wait_s, next_ms / 1000)
            with anyio.move_on_after(max(wait_s, 0.005)):
                await wake.wait()

    # --- cancel listener ---------------------------------------------------------------------

    async def cancel_listener(self, *, task_status: TaskStatus[None]) -> None:
        backoff = Backoff()
        started = False
        while True:
            try:
                async with subscribed(self.store.redis, self.store.keys.cancel) as pubsub:
                    backoff.reset()
                    if not started:
                        started = True
                        task_status.started()
                    async for message in messages(pubsub):
                        if message.get("type") == "message":
                            # "<execution id>" (cancel_previous) or "<execution id> <reason>"
                            execution_id, _, reason = str(message["data"]).partition(" ")
                            self._cancel(execution_id, reason or "cancel_previous")
                        elif message.get("type") == "subscribe":
                            # Nothing keeps a cancel: one published meanwhile is lost.
                            log.warning("cancel.resubscribed", running=len(self.running))
            except ACTOR_FAILURES as exc:
                if not started:
                    started = True
                    task_status.started()
                await _back_off(backoff, "cancel", exc)

    def _cancel(self, execution_id: str, reason: str) -> None:
        run = self.running.get(execution_id)
        if run is None:
            return
        log.info(
            "job.cancel_requested", execution_id=execution_id, task=run.job.task, reason=reason
        )
        run.cancel_requested = True
        run.cancel_reason = reason
        run.scope.cancel()

    # --- registry ----------------------------------------------------------------------------

    def record(self) -> bytes:
        """This worker's registry record: who it is and the jobs it runs now."""
        now_ms, now = time.time_ns() // 1_000_000, time.perf_counter()
        jobs = [
            (
                j.execution_id, j.queue, j.priority, j.entry_id, j.task, j.attempt,
                now_ms - round((now - (run.started or now)) * 1000),
            )
            for run in list(self.running.values())[:REGISTRY_MAX_JOBS]
            for j in (run.job,)
        ]  # fmt: skip
        return worker_record(
            worker_id=self.consumer,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=list(self.cfg.queues),
            tasks=sorted(self.handlers),
            concurrency=self.cfg.concurrency,
            started_ms=self.started_ms,
            heartbeat_s=self.cfg.heartbeat_s,
            jobs=jobs,
        )

    async def register(self) -> None:
        ttl_ms = max(1000, math.ceil(self.cfg.heartbeat_s * 1000 * REGISTRY_HEARTBEATS))
        await self.store.register(self.consumer, self.record(), ttl_ms, REGISTRY_PRUNE_MS)

    async def registry(self, *, task_status: TaskStatus[None]) -> None:
        """Register at once (a worker is listed as soon as it runs), then every
        ``heartbeat_s`` heartbeat the running jobs' entries and register again, in that order:
        a running job the record does not list has not been heartbeated yet, so its entry's
        delivery time is still when it started (what Client.job says then)."""
        try:
            await self.register()
        except ACTOR_FAILURES as exc:
            log.warning("redis.error", actor="registry", error=str(exc))
        task_status.started()
        while True:
            await anyio.sleep(self.cfg.heartbeat_s)
            await self.heartbeat()
            try:
                await self.register()
            except ACTOR_FAILURES as exc:
                log.warning("redis.error", actor="registry", error=str(exc))

    async def hand_back(self) -> int:
        """Give the entries of jobs a forced stop cancelled, and of jobs read but not started,
        to the next reclaim of any worker at once; returns how many were handed back."""
        handed = 0
        for (partition, queue, level), ids in _by_stream(self.abandoned | self.inflight).items():
            for start in range(0, len(ids), 1000):
                handed += await self.stores[partition].hand_back(
                    queue, self.consumer, ids[start : start + 1000], HAND_BACK_IDLE_MS, level
                )
        return handed


def _of(
    partition: int, found: list[tuple[Lane, list[Entry]]]
) -> list[tuple[int, Lane, list[Entry]]]:
    """Entries read from one partition's streams, with the partition."""
    return [(partition, lane, entries) for lane, entries in found]


def _by_stream(held: set[Held]) -> dict[Stream, list[str]]:
    """The entry ids of ``held``, by the stream they belong to."""
    out: dict[Stream, list[str]] = {}
    for partition, queue, level, entry_id in list(held):
        out.setdefault((partition, queue, level), []).append(entry_id)
    return out


def fmt_s(ms: int) -> str:
    """``ms`` as whole seconds for a message."""
    return f"{max(0, ms) // 1000}s"


async def _back_off(backoff: Backoff, actor: str, exc: BaseException) -> None:
    """Log a transient failure of an actor and wait the backoff's next delay."""
    delay = backoff.next()
    log.warning("redis.error", actor=actor, error=str(exc), retry_s=round(delay, 2))
    await anyio.sleep(delay)


async def _until_taken(call: Callable[[], Awaitable[Any]], actor: str) -> StateError | None:
    """Run a recording script until Redis takes it, backing off while Redis fails.

    A StateError (a key of the wrong type) is not transient: it is returned, not retried, and
    the entries stay pending; they are reclaimed and, failing again, end as poison.
    """
    backoff = Backoff()
    while True:
        try:
            await call()
            return None
        except StateError as exc:
            return exc
        except ACTOR_FAILURES as exc:
            await _back_off(backoff, actor, exc)


def _log_end(log_at: Callable[..., None], job: Job, outcome: str, **fields: Any) -> None:
    """The ``job.end`` line of a run, at the level the outcome deserves."""
    log_at(
        "job.end",
        execution_id=job.execution_id,
        task=job.task,
        attempt=job.attempt,
        outcome=outcome,
        **fields,
    )
