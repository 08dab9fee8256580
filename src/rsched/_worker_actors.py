"""The actors of a running worker (see rsched._worker for the whole picture).

- reader: XREADGROUP on the worker's queues, as many entries as there are free slots;
- runners: ``concurrency`` tasks taking jobs from the reader (async handlers in the loop,
  plain functions in worker threads), each job under its timeout and its own cancel scope;
- acker: records finished runs in batches (one script call acknowledges many entries);
- heartbeat, reclaimer, promoter and cancel listener.

They share one :class:`Slots` (the concurrency limit) and the worker's bookkeeping of the
entries it holds; everything runs on one event loop, so no lock is needed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from redis.exceptions import RedisError, ResponseError

from rsched._backoff import Backoff
from rsched._codes import Code
from rsched._errors import MalformedJob, Retry, StateError
from rsched._job import Job, parse_entry, retry_delay_s
from rsched._log import get_logger
from rsched._metrics import METRICS
from rsched._queues import Done, QueueStore, fragment
from rsched._settings import Settings

log = get_logger("rsched.worker")
# The per-job lines (job.start, job.end) under their own name, so that a busy deployment can
# quiet them (logging.getLogger("rsched.worker.jobs").setLevel("WARNING")) and keep the rest.
jobs_log = get_logger("rsched.worker.jobs")

# What an actor survives (logs, backs off, carries on): Redis unreachable or refusing, a key
# someone overwrote with the wrong type, bytes that are not UTF-8 in an entry.
ACTOR_FAILURES = (RedisError, OSError, StateError, UnicodeDecodeError)

ACK_BATCH = 1_000
CONSUMER_IDLE_FORGET_MS = 3_600_000
MAX_RETRY_DELAY_S = 365 * 86_400.0


@dataclass(slots=True)
class Running:
    job: Job
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    cancel_requested: bool = False


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

    def idle(self) -> int:
        """Slots no job holds (the reclaimer's budget)."""
        return max(0, self.total - self.used)

    def take(self, n: int) -> None:
        self.used += n

    def release(self, n: int = 1) -> None:
        self.used -= n
        self._changed.set()


class Actors:
    """The actors of one run of a worker (they share the store, the slots and the acker)."""

    def __init__(
        self,
        handlers: Mapping[str, tuple[Callable[[Job], Any], bool]],
        consumer: str,
        store: QueueStore,
        settings: Settings,
        acks: MemoryObjectSendStream[tuple[str, Done]],
        jobs: MemoryObjectSendStream[Job],
    ) -> None:
        self.handlers = handlers
        self.consumer = consumer
        self.store = store
        self.settings = settings
        self.cfg = settings.worker
        self.slots = Slots(self.cfg.concurrency)
        self.threads = anyio.CapacityLimiter(self.cfg.concurrency)
        self.acks = acks
        self.jobs = jobs
        # (queue, entry id) of every entry read and not yet acknowledged (ids are per stream):
        # the heartbeat keeps exactly these fresh.
        self.inflight: set[tuple[str, str]] = set()
        self.running: dict[str, Running] = {}  # execution id -> its run (cancel_previous)
        self.promote_wake = anyio.Event()
        self.completed = 0
        self.failed = 0

    # --- reader ------------------------------------------------------------------------------

    async def reader(self) -> None:
        backoff = Backoff()
        queues = list(self.cfg.queues)
        busy = False
        turn = 0
        while True:
            n = await self.slots.reserve(self.cfg.read_batch)
            try:
                if busy:
                    # Work is waiting: take it without blocking, in one JSON reply, starting
                    # from a different queue each time so that none starves.
                    turn = (turn + 1) % len(queues)
                    order = queues[turn:] + queues[:turn]
                    got = await self.store.take(order, self.consumer, n)
                else:
                    # Idle: block until anything arrives (one entry per queue wakes us; the
                    # rest follow through take()).
                    got = await self.store.read(queues, self.consumer, 1, self.cfg.block_ms)
                busy = bool(got)
            except ResponseError as exc:
                self.slots.commit(n, 0)
                if "NOGROUP" in str(exc):  # the server lost its data (restart without AOF)
                    log.warning("queue.group_missing", queues=",".join(queues))
                    await self._recreate_groups(backoff)
                    continue
                delay = backoff.next()
                log.error("redis.error", actor="reader", error=str(exc), retry_s=round(delay, 2))
                await anyio.sleep(delay)
                continue
            except ACTOR_FAILURES as exc:
                self.slots.commit(n, 0)
                await _back_off(backoff, "reader", exc)
                continue
            except BaseException:
                self.slots.commit(n, 0)
                raise
            backoff.reset()
            self.slots.commit(n, sum(len(entries) for _, entries in got))
            for queue, entries in got:
                await self.dispatch(queue, [(eid, f, 1) for eid, f in entries])

    async def _recreate_groups(self, backoff: Backoff) -> None:
        while True:
            try:
                await self.store.create_groups(self.cfg.queues)
                return
            except ACTOR_FAILURES as exc:
                await _back_off(backoff, "reader", exc)

    async def dispatch(self, queue: str, entries: list[tuple[str, dict[str, str], int]]) -> None:
        """Start the jobs of entries that each hold one slot (released here when not run)."""
        jobs: list[Job] = []
        for entry_id, fields, deliveries in entries:
            if fields is None or ("malformed" in fields and "task" not in fields):
                raw = fields or {}
                await self._refuse(queue, entry_id, raw, "malformed", "entry has no job fields")
                continue
            try:
                job = parse_entry(queue, entry_id, fields, deliveries)
            except MalformedJob as exc:
                await self._refuse(queue, entry_id, fields, "malformed", str(exc))
                continue
            if job.task not in self.handlers:
                await self._refuse(
                    queue,
                    entry_id,
                    fields,
                    "unknown_task",
                    f"no handler registered for task {job.task!r} on worker {self.consumer}",
                )
                continue
            jobs.append(job)
        if not jobs:
            return
        scheduled = [j for j in jobs if j.schedule_id]
        if scheduled:
            superseded = await self._start_scheduled(queue, scheduled)
            if superseded:
                jobs = [j for j in jobs if j.entry_id not in superseded]
        for job in jobs:
            self.inflight.add((queue, job.entry_id))
            self.jobs.send_nowait(job)

    async def _start_scheduled(self, queue: str, jobs: list[Job]) -> set[str]:
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
            codes = await self.store.start(queue, self.consumer, items)
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

    async def _refuse(
        self, queue: str, entry_id: str, raw: dict[str, str], reason: str, message: str
    ) -> None:
        """Dead-letter an entry this worker cannot run (malformed, or no handler)."""
        await self._bury(
            queue,
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
        queue: str,
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
            await self.store.dead(
                queue,
                entry_id,
                raw=raw,
                reason=reason,
                error_type=error_type,
                error_message=message,
                deliveries=deliveries,
                worker=self.consumer,
                extra=fragment(extra),
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
        started = time.perf_counter()
        error: BaseException | None = None
        timed_out = False
        # One scope serves both the job's timeout (its deadline) and cancel_previous (cancel());
        # run.cancel_requested tells them apart.
        run.scope.deadline = anyio.current_time() + job.timeout_s
        if not is_async:
            job = dataclasses.replace(job, stop_event=threading.Event())
        try:
            with run.scope:
                if is_async:
                    await fn(job)
                else:
                    await anyio.to_thread.run_sync(
                        fn, job, abandon_on_cancel=True, limiter=self.threads
                    )
            timed_out = run.scope.cancelled_caught and not run.cancel_requested
        except Exception as exc:
            error = exc
        except BaseException:
            # Cancelled by shutdown: no outcome, the entry stays pending for another worker.
            self.inflight.discard((job.queue, job.entry_id))
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
            await self._finish(job, "cancelled", duration_ms, {"reason": "cancel_previous"})
        elif timed_out:
            await self._fail(job, duration_ms, None, timed_out=True)
        elif error is not None:
            await self._fail(job, duration_ms, error)
        else:
            await self._finish(job, "completed", duration_ms, {})

    async def _finish(
        self, job: Job, event: str, duration_ms: float, extra: dict[str, Any]
    ) -> None:
        _log_end(jobs_log.info, job, event, duration_ms=duration_ms)
        self.completed += event == "completed"
        item = (
            job.queue,
            Done(
                job.entry_id,
                job.execution_id,
                job.schedule_id,
                job.attempt,
                event,
                fragment({"duration_ms": duration_ms, **extra}) if job.schedule_id else "",
            ),
        )
        try:
            self.acks.send_nowait(item)  # no checkpoint per job on the hot path
        except anyio.WouldBlock:
            await self.acks.send(item)

    async def _fail(
        self, job: Job, duration_ms: float, error: BaseException | None, *, timed_out: bool = False
    ) -> None:
        self.failed += 1
        if timed_out:
            error_type, message, tb = "TimeoutError", f"timed out after {job.timeout_s}s", ""
        else:
            assert error is not None
            error_type, message = type(error).__name__, str(error)
            tb = "".join(traceback.format_exception(error))[-self.cfg.traceback_max_chars :]
        event = "timed_out" if timed_out else "failed"
        extra = {"duration_ms": duration_ms, "error_type": error_type, "error": message[:500]}
        if job.is_last_attempt:
            reason = "timeout" if timed_out else "max_retries"
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
                lambda: self.store.dead(
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
                ),
            )
            return
        requested = error.delay_s if isinstance(error, Retry) else None
        if isinstance(requested, int | float) and not math.isnan(requested):
            delay_s = min(max(float(requested), 0.0), MAX_RETRY_DELAY_S)
        else:
            delay_s = retry_delay_s(job.options, job.attempt)
        delay_ms = round(delay_s * 1000)
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
            lambda: self.store.retry(
                job.queue,
                job.entry_id,
                next_fields=job.next_attempt_fields(),
                delay_ms=delay_ms,
                execution_id=job.execution_id,
                schedule_id=job.schedule_id,
                attempt=job.attempt,
                event=event,
                extra=fragment(extra),
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
            self.inflight.discard((job.queue, job.entry_id))

    # --- acker -------------------------------------------------------------------------------

    async def acker(
        self, inbox: MemoryObjectReceiveStream[tuple[str, Done]], done: anyio.Event
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

    async def _ack(self, batch: list[tuple[str, Done]]) -> None:
        by_queue: dict[str, list[Done]] = {}
        for queue, item in batch:
            by_queue.setdefault(queue, []).append(item)
        for queue, items in by_queue.items():
            refused = await _until_taken(
                functools.partial(self.store.complete, queue, items), "acker"
            )
            if refused is not None:
                log.error("queue.unrecorded", queue=queue, jobs=len(items), error=str(refused))
            for item in items:
                self.inflight.discard((queue, item.entry_id))

    # --- heartbeat ---------------------------------------------------------------------------

    async def heartbeat(self) -> None:
        while True:
            await anyio.sleep(self.cfg.heartbeat_s)
            by_queue: dict[str, list[str]] = {}
            for queue, entry_id in list(self.inflight):
                by_queue.setdefault(queue, []).append(entry_id)
            for queue, ids in by_queue.items():
                for start in range(0, len(ids), 1000):
                    try:
                        lost = await self.store.heartbeat(
                            queue, self.consumer, ids[start : start + 1000]
                        )
                    except ACTOR_FAILURES as exc:
                        log.warning("redis.error", actor="heartbeat", error=str(exc))
                        break
                    for entry_id in lost:
                        if (queue, entry_id) in self.inflight:
                            log.warning("job.lost", entry_id=entry_id, queue=queue)

    # --- reclaimer ---------------------------------------------------------------------------

    async def reclaimer(self) -> None:
        cursors = dict.fromkeys(self.cfg.queues, "0-0")
        visibility_ms = math.ceil(self.cfg.visibility_timeout_s * 1000)
        rounds = 0
        while True:
            await anyio.sleep(self.cfg.reclaim_interval_s)
            rounds += 1
            for queue in self.cfg.queues:
                n = min(self.slots.idle(), self.cfg.read_batch)
                if n == 0:
                    break
                try:
                    cursor, claimed = await self.store.reclaim(
                        queue, self.consumer, visibility_ms, cursors[queue], n
                    )
                except ACTOR_FAILURES as exc:
                    log.warning("redis.error", actor="reclaimer", error=str(exc))
                    continue
                cursors[queue] = cursor
                fresh = [c for c in claimed if (queue, c[0]) not in self.inflight]
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
                        await self._poison(queue, entry_id, fields, deliveries)
                    else:
                        runnable.append((entry_id, fields, deliveries))
                if runnable:
                    await self.dispatch(queue, runnable)
            if rounds % 100 == 1:
                await self._forget_consumers()

    async def _poison(
        self, queue: str, entry_id: str, fields: dict[str, str], deliveries: int
    ) -> None:
        message = (
            f"delivered {deliveries} times (more than max_deliveries={self.cfg.max_deliveries}); "
            "it keeps crashing or stalling its workers"
        )
        await self._bury(
            queue,
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
            await self.store.forget_consumers(
                self.cfg.queues, keep=self.consumer, idle_ms=CONSUMER_IDLE_FORGET_MS
            )
        except ACTOR_FAILURES as exc:
            log.warning("redis.error", actor="reclaimer", error=str(exc))

    # --- promoter ----------------------------------------------------------------------------

    async def promoter(self) -> None:
        backoff = Backoff()
        interval_s = self.cfg.promote_interval_ms / 1000
        while True:
            wait_s = interval_s
            try:
                for queue in self.cfg.queues:
                    while True:
                        moved, next_ms = await self.store.promote(queue)
                        if moved < 1000:
                            break
                    if next_ms is not None:
                        wait_s = min(wait_s, next_ms / 1000)
                backoff.reset()
            except ACTOR_FAILURES as exc:
                wait_s = backoff.next()
                log.warning(
                    "redis.error", actor="promoter", error=str(exc), retry_s=round(wait_s, 2)
                )
            self.promote_wake = anyio.Event()
            with anyio.move_on_after(max(wait_s, 0.005)):
                await self.promote_wake.wait()

    # --- cancel listener ---------------------------------------------------------------------

    async def cancel_listener(self, *, task_status: TaskStatus[None]) -> None:
        backoff = Backoff()
        started = False
        while True:
            try:
                async with self.store.redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self.store.keys.cancel)
                    backoff.reset()
                    if not started:
                        started = True
                        task_status.started()
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            self._cancel(str(message["data"]))
            except ACTOR_FAILURES as exc:
                if not started:
                    started = True
                    task_status.started()
                await _back_off(backoff, "cancel", exc)

    def _cancel(self, execution_id: str) -> None:
        run = self.running.get(execution_id)
        if run is None:
            return
        log.info("job.cancel_requested", execution_id=execution_id, task=run.job.task)
        run.cancel_requested = True
        run.scope.cancel()


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
