"""The worker: runs registered task handlers for jobs read from queue streams.

Actors (anyio tasks under one task group, stopped in order on shutdown):
- reader: XREADGROUP on the worker's queues, as many entries as there are free slots;
- runners: ``concurrency`` tasks taking jobs from the reader (async handlers in the loop,
  plain functions in worker threads), each job under its timeout and its own cancel scope
  (cancel_previous);
- acker: records finished runs in batches (one script call acknowledges many entries);
- heartbeat: keeps the entries of running jobs fresh so no other worker reclaims them;
- reclaimer: takes over entries idle longer than the visibility timeout (a dead worker's),
  dead-lettering those delivered more than ``max_deliveries`` times (poison);
- promoter: moves due retries and delayed jobs from the delayed sets into the streams;
- cancel listener: cancels a running handler when cancel_previous fires a newer occurrence.

Delivery is at least once: an entry is acknowledged only in the same script that records its
outcome, so a worker that dies at any point leaves it pending for another worker.
"""

from __future__ import annotations

import inspect
import math
import os
import socket
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from rsched._backoff import Backoff
from rsched._connection import connect, warn_if_unsafe
from rsched._errors import ConfigError, InvalidJob, Retry
from rsched._job import Job, MalformedJob, parse_entry, retry_delay_s
from rsched._keys import Keys
from rsched._log import get_logger
from rsched._queues import Done, QueueStore, check_name, fragment
from rsched._settings import Settings, WorkerSettings

log = get_logger("rsched.worker")

F = TypeVar("F", bound=Callable[..., Any])
Handler = Callable[[Job], Any]

ACK_BATCH = 1_000
ACK_BUFFER = 100_000
ACK_FLUSH_S = 5.0
CONSUMER_IDLE_FORGET_MS = 3_600_000


@dataclass(slots=True)
class _Running:
    job: Job
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    cancel_requested: bool = False


class _Slots:
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
        await anyio.sleep(0)
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


class Worker:
    """Runs registered task handlers for jobs read from queue streams.

    ``queues`` and ``concurrency`` are defaults that ``RSCHED_WORKER__QUEUES`` /
    ``RSCHED_WORKER__CONCURRENCY`` and the ``rsched-worker`` flags override. Register handlers
    with :meth:`task`; run with ``await worker.run()`` (or the ``rsched-worker`` command).

    Sync handlers run in worker threads. A thread cannot be interrupted: when its job times
    out or is cancelled, the job is recorded as timed out / cancelled and the worker moves on,
    but the thread keeps running until the function returns (and keeps its thread slot).
    Since 0.1.0.
    """

    def __init__(
        self,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        *,
        settings: Settings | None = None,
    ) -> None:
        self._handlers: dict[str, tuple[Handler, bool]] = {}
        self._queues_arg = list(queues) if queues is not None else None
        self._concurrency_arg = concurrency
        self._settings_arg = settings
        self._overrides: dict[str, Any] = {}
        self._root_overrides: dict[str, Any] = {}
        self._stopping = anyio.Event()
        self._hard = False
        self._runners_scope: anyio.CancelScope | None = None
        self._all_scope: anyio.CancelScope | None = None
        self._inflight: dict[str, str] = {}  # entry id -> queue, from read until acknowledged
        self._running: dict[str, _Running] = {}  # execution id -> its run
        self._promote_wake = anyio.Event()
        self.completed_total = 0
        self.failed_total = 0
        self.consumer = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"

    # --- registration ----------------------------------------------------------------------

    def task(self, name: str) -> Callable[[F], F]:
        """Register the decorated function as the handler of task ``name``."""

        def decorate(fn: F) -> F:
            self.add_task(name, fn)
            return fn

        return decorate

    def add_task(self, name: str, fn: Handler) -> None:
        """Register ``fn`` (async or plain function taking a :class:`Job`) for task ``name``."""
        try:
            check_name(name, "task")
        except InvalidJob as exc:
            raise ConfigError(str(exc)) from None
        if name in self._handlers:
            raise ConfigError(f"task {name!r} is registered twice; give each handler one name")
        if not callable(fn):
            raise ConfigError(f"handler of task {name!r} is not callable: {fn!r}")
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
        )
        self._handlers[name] = (fn, is_async)

    @property
    def tasks(self) -> list[str]:
        return sorted(self._handlers)

    def configure(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        redis_url: str | None = None,
        prefix: str | None = None,
    ) -> None:
        """Override settings (the ``rsched-worker`` flags); wins over env and constructor."""
        if queues is not None:
            self._overrides["queues"] = list(queues)
        if concurrency is not None:
            self._overrides["concurrency"] = concurrency
        if redis_url is not None:
            self._root_overrides["redis_url"] = redis_url
        if prefix is not None:
            self._root_overrides["prefix"] = prefix

    def resolve_settings(self) -> Settings:
        """The effective settings: flags > RSCHED_* environment > constructor > defaults."""
        base = self._settings_arg or Settings()
        given = base.worker.model_fields_set
        worker: dict[str, Any] = base.worker.model_dump()
        if self._queues_arg is not None and "queues" not in given:
            worker["queues"] = self._queues_arg
        if self._concurrency_arg is not None and "concurrency" not in given:
            worker["concurrency"] = self._concurrency_arg
        worker.update(self._overrides)
        try:
            cfg = WorkerSettings.model_validate(worker)
        except ValueError as exc:
            raise ConfigError(f"invalid worker settings: {exc}") from None
        if not cfg.queues:
            raise ConfigError("queues: give at least one queue (e.g. --queues default)")
        for queue in cfg.queues:
            try:
                check_name(queue, "queue")
            except InvalidJob as exc:
                raise ConfigError(str(exc)) from None
        return base.model_copy(update={"worker": cfg, **self._root_overrides})

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called (until the next :meth:`run`)."""
        return self._stopping.is_set()

    def stop(self, *, graceful: bool = True) -> None:
        """Stop reading; in-flight jobs get ``shutdown_grace_period_s`` (none when
        ``graceful=False``), then the rest are cancelled and left unacknowledged."""
        if not graceful:
            self._hard = True
            if self._runners_scope is not None:
                self._runners_scope.cancel()
        self._stopping.set()

    async def run(
        self,
        redis: Redis | None = None,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run until :meth:`stop`; raises ConfigError for bad settings."""
        settings = self.resolve_settings()
        cfg = settings.worker
        own = redis is None
        client = connect(settings.url) if redis is None else redis
        store = QueueStore(
            client,
            Keys(settings.prefix),
            history_limit=settings.history_limit,
            max_payload_bytes=settings.max_payload_bytes,
            dead_letter_max_entries=cfg.dead_letter_max_entries,
        )
        self._stopping = anyio.Event()
        self._hard = False
        self._inflight.clear()
        self._running.clear()
        log.info(
            "worker.start",
            worker=self.consumer,
            queues=",".join(cfg.queues),
            concurrency=cfg.concurrency,
            tasks=",".join(self.tasks),
            prefix=settings.prefix,
        )
        try:
            if not await self._prepare(store, cfg):
                task_status.started()
                return
            await self._serve(store, settings, task_status)
        finally:
            if own:
                with anyio.CancelScope(shield=True):
                    await client.aclose()
            log.info(
                "worker.stop",
                worker=self.consumer,
                completed=self.completed_total,
                failed=self.failed_total,
                left_pending=len(self._inflight),
            )

    async def _prepare(self, store: QueueStore, cfg: WorkerSettings) -> bool:
        """Check the server and create the consumer groups, waiting for Redis if it is down.
        Returns False when asked to stop first."""
        backoff = Backoff()
        while not self._stopping.is_set():
            try:
                await warn_if_unsafe(store.redis, log)
                await store.create_groups(cfg.queues)
                return True
            except (RedisError, OSError) as exc:
                delay = backoff.next()
                log.warning("redis.error", actor="start", error=str(exc), retry_s=round(delay, 2))
                with anyio.move_on_after(delay):
                    await self._stopping.wait()
        return False

    async def _serve(
        self, store: QueueStore, settings: Settings, task_status: TaskStatus[None]
    ) -> None:
        cfg = settings.worker
        slots = _Slots(cfg.concurrency)
        threads = anyio.CapacityLimiter(cfg.concurrency)
        send, recv = anyio.create_memory_object_stream[tuple[str, Done]](ACK_BUFFER)
        # Unbounded only in type: the slots bound what the reader hands over.
        jobs, jobs_out = anyio.create_memory_object_stream[Job](math.inf)
        ctx = _Context(self, store, settings, slots, threads, send, jobs)
        acker_done = anyio.Event()
        async with anyio.create_task_group() as services:
            self._all_scope = services.cancel_scope
            services.start_soon(ctx.acker, recv, acker_done)
            services.start_soon(ctx.heartbeat)
            services.start_soon(ctx.promoter)
            await services.start(ctx.cancel_listener)
            with anyio.CancelScope() as runners_scope:
                self._runners_scope = runners_scope
                if self._hard:
                    runners_scope.cancel()
                async with anyio.create_task_group() as runners:
                    with jobs_out:
                        for _ in range(cfg.concurrency):
                            runners.start_soon(ctx.runner, jobs_out.clone())
                    async with anyio.create_task_group() as intake:
                        intake.start_soon(ctx.reader)
                        intake.start_soon(ctx.reclaimer)
                        task_status.started()
                        await self._stopping.wait()
                        intake.cancel_scope.cancel()
                    jobs.close()  # runners finish the jobs already read, then return
                    log.info(
                        "worker.draining",
                        running=len(self._running),
                        grace_s=cfg.shutdown_grace_period_s,
                    )
                    if self._hard:
                        runners_scope.cancel()
                    else:
                        runners_scope.deadline = anyio.current_time() + cfg.shutdown_grace_period_s
            self._runners_scope = None
            if runners_scope.cancelled_caught:
                log.warning("worker.grace_expired", left_pending=len(self._inflight))
            send.close()
            if not self._hard:
                with anyio.move_on_after(ACK_FLUSH_S):
                    await acker_done.wait()
            services.cancel_scope.cancel()
        self._all_scope = None


class _Context:
    """The actors of one run of a worker (they share the store, the slots and the acker)."""

    def __init__(
        self,
        worker: Worker,
        store: QueueStore,
        settings: Settings,
        slots: _Slots,
        threads: anyio.CapacityLimiter,
        acks: MemoryObjectSendStream[tuple[str, Done]],
        jobs: MemoryObjectSendStream[Job],
    ) -> None:
        self.w = worker
        self.store = store
        self.settings = settings
        self.cfg = settings.worker
        self.slots = slots
        self.threads = threads
        self.acks = acks
        self.jobs = jobs
        self.consumer = worker.consumer

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
            except (RedisError, OSError) as exc:
                self.slots.commit(n, 0)
                delay = backoff.next()
                log.warning("redis.error", actor="reader", error=str(exc), retry_s=round(delay, 2))
                await anyio.sleep(delay)
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
            except (RedisError, OSError) as exc:
                delay = backoff.next()
                log.warning("redis.error", actor="reader", error=str(exc), retry_s=round(delay, 2))
                await anyio.sleep(delay)

    async def dispatch(self, queue: str, entries: list[tuple[str, dict[str, str], int]]) -> None:
        """Start the jobs of entries that each hold one slot (released here when not run)."""
        jobs: list[Job] = []
        for entry_id, fields, deliveries in entries:
            if fields is None or ("malformed" in fields and "task" not in fields):
                raw = fields or {}
                await self._dead_now(queue, entry_id, raw, "malformed", "entry has no job fields")
                continue
            try:
                job = parse_entry(queue, entry_id, fields, deliveries)
            except MalformedJob as exc:
                await self._dead_now(queue, entry_id, fields, "malformed", str(exc))
                continue
            if job.task not in self.w._handlers:
                await self._dead_now(
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
            self.w._inflight[job.entry_id] = queue
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
        except (RedisError, OSError) as exc:
            # Run them anyway: the marker and history are bookkeeping; the job must not wait.
            log.warning("redis.error", actor="start", error=str(exc))
            return set()
        superseded: set[str] = set()
        for job, code in zip(jobs, codes, strict=True):
            if code == 0:
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

    async def _dead_now(
        self, queue: str, entry_id: str, raw: dict[str, str], reason: str, message: str
    ) -> None:
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
                error_type="MalformedJob" if reason == "malformed" else "UnknownTask",
                error_message=message,
                worker=self.consumer,
                extra=fragment({"reason": reason, "worker": self.consumer}),
            )
        except (RedisError, OSError) as exc:  # left pending: reclaimed and judged again later
            log.warning("redis.error", actor="dead", error=str(exc))

    # --- runners -----------------------------------------------------------------------------

    async def runner(self, inbox: MemoryObjectReceiveStream[Job]) -> None:
        async with inbox:
            async for job in inbox:
                await self.run_job(job)

    async def run_job(self, job: Job) -> None:
        fn, is_async = self.w._handlers[job.task]
        run = _Running(job)
        self.w._running[job.execution_id] = run
        log.info(
            "job.start",
            execution_id=job.execution_id,
            task=job.task,
            attempt=job.attempt,
            queue=job.queue,
        )
        started = time.perf_counter()
        error: BaseException | None = None
        timed_out = False
        # One scope serves both the job's timeout (its deadline) and cancel_previous (cancel());
        # run.cancel_requested tells them apart.
        run.scope.deadline = anyio.current_time() + job.timeout_s
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
            self.w._inflight.pop(job.entry_id, None)
            raise
        finally:
            self.w._running.pop(job.execution_id, None)
            self.slots.release()
        duration_ms = round((time.perf_counter() - started) * 1000, 1)
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
        log.info(
            "job.end",
            execution_id=job.execution_id,
            task=job.task,
            attempt=job.attempt,
            outcome=event,
            duration_ms=duration_ms,
        )
        self.w.completed_total += event == "completed"
        await self.acks.send(
            (
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
        )

    async def _fail(
        self, job: Job, duration_ms: float, error: BaseException | None, *, timed_out: bool = False
    ) -> None:
        self.w.failed_total += 1
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
            log.error(
                "job.end",
                execution_id=job.execution_id,
                task=job.task,
                attempt=job.attempt,
                outcome="dead",
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
        delay_s = requested if requested is not None else retry_delay_s(job.options, job.attempt)
        delay_ms = max(0, round(delay_s * 1000))
        log.warning(
            "job.end",
            execution_id=job.execution_id,
            task=job.task,
            attempt=job.attempt,
            outcome=event,
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
            self.w._promote_wake.set()

    async def _record(self, job: Job, call: Callable[[], Awaitable[Any]]) -> None:
        """Run a recording script until Redis takes it (the entry stays pending meanwhile)."""
        backoff = Backoff()
        try:
            while True:
                try:
                    await call()
                    return
                except (RedisError, OSError) as exc:
                    delay = backoff.next()
                    log.warning(
                        "redis.error", actor="runner", error=str(exc), retry_s=round(delay, 2)
                    )
                    await anyio.sleep(delay)
        finally:
            self.w._inflight.pop(job.entry_id, None)

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
        backoff = Backoff()
        for queue, items in by_queue.items():
            while True:
                try:
                    await self.store.complete(queue, items)
                    break
                except (RedisError, OSError) as exc:
                    delay = backoff.next()
                    log.warning(
                        "redis.error", actor="acker", error=str(exc), retry_s=round(delay, 2)
                    )
                    await anyio.sleep(delay)
            for item in items:
                self.w._inflight.pop(item.entry_id, None)

    # --- heartbeat ---------------------------------------------------------------------------

    async def heartbeat(self) -> None:
        while True:
            await anyio.sleep(self.cfg.heartbeat_s)
            by_queue: dict[str, list[str]] = {}
            for entry_id, queue in list(self.w._inflight.items()):
                by_queue.setdefault(queue, []).append(entry_id)
            for queue, ids in by_queue.items():
                for start in range(0, len(ids), 1000):
                    try:
                        lost = await self.store.heartbeat(
                            queue, self.consumer, ids[start : start + 1000]
                        )
                    except (RedisError, OSError) as exc:
                        log.warning("redis.error", actor="heartbeat", error=str(exc))
                        break
                    for entry_id in lost:
                        if entry_id in self.w._inflight:
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
                except (RedisError, OSError) as exc:
                    log.warning("redis.error", actor="reclaimer", error=str(exc))
                    continue
                cursors[queue] = cursor
                fresh = [c for c in claimed if c[0] not in self.w._inflight]
                self.slots.take(len(fresh))
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
        self.slots.release()
        message = (
            f"delivered {deliveries} times (more than max_deliveries={self.cfg.max_deliveries}); "
            "it keeps crashing or stalling its workers"
        )
        log.error("job.dead", entry_id=entry_id, queue=queue, reason="poison", error=message)
        try:
            await self.store.dead(
                queue,
                entry_id,
                raw=fields,
                reason="poison",
                error_type="Poison",
                error_message=message,
                deliveries=deliveries,
                worker=self.consumer,
                extra=fragment({"reason": "poison", "deliveries": deliveries}),
            )
        except (RedisError, OSError) as exc:
            log.warning("redis.error", actor="reclaimer", error=str(exc))

    async def _forget_consumers(self) -> None:
        """Remove consumers of dead workers once they hold nothing (keeps XINFO readable)."""
        for queue in self.cfg.queues:
            try:
                consumers = await self.store.redis.xinfo_consumers(
                    self.store.keys.queue(queue), "rsched"
                )
                for c in consumers:
                    name = str(c.get("name"))
                    idle = int(c.get("idle", 0))
                    if (
                        name != self.consumer
                        and int(c.get("pending", 0)) == 0
                        and idle > CONSUMER_IDLE_FORGET_MS
                    ):
                        await self.store.redis.xgroup_delconsumer(
                            self.store.keys.queue(queue), "rsched", name
                        )
            except (RedisError, OSError):
                return

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
            except (RedisError, OSError) as exc:
                wait_s = backoff.next()
                log.warning("redis.error", actor="promoter", error=str(exc), retry_s=wait_s)
            self.w._promote_wake = anyio.Event()
            with anyio.move_on_after(max(wait_s, 0.005)):
                await self.w._promote_wake.wait()

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
            except (RedisError, OSError) as exc:
                delay = backoff.next()
                log.warning("redis.error", actor="cancel", error=str(exc), retry_s=round(delay, 2))
                if not started:
                    started = True
                    task_status.started()
                await anyio.sleep(delay)

    def _cancel(self, execution_id: str) -> None:
        run = self.w._running.get(execution_id)
        if run is None:
            return
        log.info("job.cancel_requested", execution_id=execution_id, task=run.job.task)
        run.cancel_requested = True
        run.scope.cancel()
