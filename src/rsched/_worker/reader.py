"""The reader: takes entries from the worker's queues and hands their jobs to the runners.

Each queue is a stream per priority level, and a busy read starts from the level whose weighted
turn it is (LevelTurns); in a deployment of several partitions, each busy read starts from the
next partition (each partition's streams are read by one take.lua call), and an idle worker
blocks in one XREADGROUP per partition (watchers). Entries it cannot run are dead-lettered here
(malformed, or a task no live worker has past its grace), and so are those the reclaimer finds
poisoned (bury).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import anyio
from redis.exceptions import ResponseError

from rsched._core.backoff import Backoff
from rsched._core.codes import Code
from rsched._core.errors import MalformedJob
from rsched._core.history import fragment
from rsched._core.humanize import duration
from rsched._core.job import Entry, Job, Lane, parse_entry
from rsched._core.limits import limits_of
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS
from rsched._core.partitions import partition_of
from rsched._core.rules import PRIORITIES, Priority
from rsched._store.flow_keys import step_keys
from rsched._store.runs_log import run_record
from rsched._store.worker_calls import Expiring
from rsched._worker.acker import finish_home
from rsched._worker.failures import ACTOR_FAILURES, back_off
from rsched._worker.inbox import Inbox
from rsched._worker.state import Stream, WorkerState

log = get_logger("rsched.worker")
jobs_log = get_logger("rsched.worker.jobs")

# A job whose task this worker lacks goes back to its delayed set for this long while another
# live worker has the task (it is taken from there by any reader), else while the grace lasts.
UNKNOWN_TASK_RETRY_MS = 1_000
UNKNOWN_TASK_WAIT_MS = 5_000
# How long the tasks of live workers are trusted before the registry is read again.
LIVE_TASKS_TTL_S = 2.0
# A job whose start deadline is further off than this by the server's clock, as the last
# expire call told it, starts without asking (a read of the clock is trusted this long): the
# decision is the script's, by Redis TIME; the learnt clock only spares it the jobs far from
# theirs, and the margin covers the reply's way back and a step of the server's clock.
DEADLINE_MARGIN_MS = 1_000
SERVER_CLOCK_TTL_S = 30.0


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


class Reader:
    """Reads the worker's queues into ``jobs`` (the runners' inbox), as many entries as there
    are free slots."""

    def __init__(self, state: WorkerState, jobs: Inbox) -> None:
        self.state = state
        self.jobs = jobs
        self.turns = LevelTurns(state.cfg.priority_weights)
        # Set while the reader of a deployment of several partitions found nothing: the
        # watchers block on their partitions then, and set found when one got an entry (or
        # failed: the reader then looks itself).
        self._idle = anyio.Event()
        self._found = anyio.Event()
        self._live_tasks: tuple[float, set[str]] = (-math.inf, set())
        # Per partition: (time.monotonic(), Redis TIME in ms) at the last expire call's reply.
        self._server_clock: dict[int, tuple[float, int]] = {}

    async def run(self) -> None:
        state = self.state
        cfg, slots, store, consumer = state.cfg, state.slots, state.store, state.consumer
        backoff = Backoff()
        queues = list(cfg.queues)
        every: list[Lane] = [(q, level) for level in PRIORITIES for q in queues]
        partitions = len(state.stores)
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
                n = await slots.reserve(cfg.read_batch)
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
                            got = _of(0, await store.take(lanes, consumer, n))
                        else:
                            lead = (lead + 1) % partitions
                            got = await self._take_partitions(lanes, n, lead)
                    else:
                        # Idle: block until anything arrives (one entry per stream wakes us;
                        # the rest follow through take()).
                        got = _of(0, await store.read(every, consumer, 1, cfg.block_ms))
                    busy = bool(got)
                except ResponseError as exc:
                    slots.commit(n, 0)
                    await self._read_refused(exc, backoff)
                    continue
                except ACTOR_FAILURES as exc:
                    slots.commit(n, 0)
                    await back_off(backoff, "reader", exc)
                    continue
                except BaseException:
                    slots.commit(n, 0)
                    raise
                backoff.reset()
                slots.commit(n, sum(len(entries) for _, _, entries in got))
                for partition, lane, entries in got:
                    await self.dispatch(lane, [(eid, f, 1) for eid, f in entries], partition)

    async def _take_partitions(
        self, lanes: list[Lane], n: int, lead: int
    ) -> list[tuple[int, Lane, list[Entry]]]:
        """Up to ``n`` entries from the partitions in turn, starting with ``lead`` (each busy
        read starts with the next one, so no partition starves behind a busier one)."""
        got: list[tuple[int, Lane, list[Entry]]] = []
        stores, consumer = self.state.stores, self.state.consumer
        partitions = len(stores)
        for step in range(partitions):
            partition = (lead + step) % partitions
            found = _of(partition, await stores[partition].take(lanes, consumer, n))
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
        state = self.state
        store = state.stores[partition]
        backoff = Backoff()
        while True:
            await self._idle.wait()
            await state.slots.wait_free()
            try:
                got = await store.read(every, state.consumer, 1, state.cfg.block_ms)
            except ResponseError as exc:
                self._found.set()
                await self._read_refused(exc, backoff)
                continue
            except ACTOR_FAILURES as exc:
                self._found.set()
                await back_off(backoff, "reader", exc)
                continue
            backoff.reset()
            if got:
                state.slots.take(sum(len(entries) for _, entries in got))
                for lane, entries in got:
                    await self.dispatch(lane, [(eid, f, 1) for eid, f in entries], partition)
                self._found.set()

    async def _read_refused(self, exc: ResponseError, backoff: Backoff) -> None:
        if "NOGROUP" in str(exc):  # the server lost its data (restart without AOF)
            log.warning("queue.group_missing", queues=",".join(self.state.cfg.queues))
            await self._recreate_groups(backoff)
            return
        delay = backoff.next()
        log.error("redis.error", actor="reader", error=str(exc), retry_s=round(delay, 2))
        await anyio.sleep(delay)

    async def _recreate_groups(self, backoff: Backoff) -> None:
        while True:
            try:
                for store in self.state.stores:
                    await store.create_groups(self.state.cfg.queues)
                return
            except ACTOR_FAILURES as exc:
                await back_off(backoff, "reader", exc)

    async def dispatch(
        self, lane: Lane, entries: list[tuple[str, dict[str, str], int]], partition: int = 0
    ) -> None:
        """Start the jobs of entries of one stream of ``partition`` that each hold one slot
        (released here when not run)."""
        state = self.state
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
            if job.task not in state.handlers:
                await self._unknown_task(job, fields)
                continue
            jobs.append(job)
        # Before the limits: an expired job takes no hold and spends no start of a rate. One
        # that waited on a limit comes back holding its keys (granted by limit_resume), which
        # the script that records it expired releases.
        if any(j.options.start_deadline is not None for j in jobs):
            jobs = await self._expire(stream, jobs)
        if state.task_limits or any('"limits"' in j.fields.get("opts", "") for j in jobs):
            jobs = await self._limit(stream, jobs)
        if not jobs:
            return
        scheduled = [j for j in jobs if j.schedule_id]
        if scheduled:
            superseded = await self._start_scheduled(stream, scheduled)
            if superseded:
                await self._let_go([j for j in jobs if j.entry_id in superseded])
                jobs = [j for j in jobs if j.entry_id not in superseded]
        steps = [j for j in jobs if "flow" in j.fields]
        if steps:
            over = await self._start_steps(stream, steps)
            if over:
                await self._let_go([j for j in jobs if j.entry_id in over])
                jobs = [j for j in jobs if j.entry_id not in over]
        for job in jobs:
            state.inflight.add((partition, queue, level, job.entry_id))
            self.jobs.put(job)

    async def _limit(self, stream: Stream, jobs: list[Job]) -> list[Job]:
        """Jobs that hold limits take them or wait aside (lua/limit_acquire.lua); the others pass.
        A job whose key cannot be filled from its payload is dead-lettered (bad_limit)."""
        state = self.state
        out: list[Job] = []
        limited: list[Job] = []
        for job in jobs:
            try:
                held = limits_of(
                    state.task_limits.get(job.task, ()), job.payload, job.fields.get("opts")
                )
            except ValueError as exc:
                await self._refuse(stream, job.entry_id, dict(job.fields), "bad_limit", str(exc))
                continue
            if held and stream[0] != 0 and "flow" in job.fields:
                # Its flow is in this partition: moved to partition 0 it could not record its
                # end there (docs/flows.md). It runs here, without the task's limits.
                log.warning("flow.limits_not_held", execution_id=job.execution_id, task=job.task)
                held = ()
            if held:
                # Set on the job just parsed (cheaper than a copy on this path; nobody else
                # holds it yet).
                object.__setattr__(job, "limits", held)
                object.__setattr__(job, "home", self._home(job))
                limited.append(job)
            else:
                out.append(job)
        if not limited:
            return out
        partition, queue, level = stream
        if partition != 0:
            await self._forward(stream, limited)
            return out
        items = [(j.entry_id, j.execution_id, j.fields.get("limit_order", ""), j.limits)
                 for j in limited]  # fmt: skip
        try:
            codes = await state.store.acquire(
                state.store.keys.queue(queue, level), items, state.hold_ms
            )
        except ACTOR_FAILURES as exc:
            # Left pending and unheld: reclaimed after the visibility timeout, and judged again.
            log.warning("redis.error", actor="acquire", error=str(exc))
            state.slots.release(len(limited))
            return out
        for job, (code, key) in zip(limited, codes, strict=True):
            if code == Code.OK:
                state.holding[job.execution_id] = tuple(lim.key for lim in job.limits)
                out.append(job)
                continue
            state.slots.release()
            if code == Code.LIMITED:
                template = next((lim.template for lim in job.limits if lim.key == key), key)
                if METRICS.on:
                    METRICS.limit_throttled.labels(template).inc()
                log.info(
                    "job.waiting",
                    execution_id=job.execution_id,
                    task=job.task,
                    queue=queue,
                    limit=key,
                )
        return out

    async def _expire(self, stream: Stream, jobs: list[Job]) -> list[Job]:
        """Jobs whose start deadline passed by Redis time end ``expired`` without running
        (lua/expire.lua: acknowledged, recorded, their schedule's run ended and their limit
        holds released in one step); returns the others."""
        state = self.state
        partition, queue, level = stream
        horizon = self._deadline_horizon(partition)
        timed = [j for j in jobs if (by := j.start_by_ms) is not None and by <= horizon]
        if not timed:
            return jobs
        # In partition 0 a job read again after waiting on a limit holds its keys, and a
        # schedule's job may have its schedule elsewhere (Job.home); elsewhere neither.
        holds = [self._granted(j) if partition == 0 else () for j in timed]
        homes = [self._home(j) for j in timed]
        items = [
            Expiring(
                j.entry_id,
                j.execution_id,
                j.schedule_id if home is None else None,
                j.attempt,
                j.start_by_ms or 0,
                run_record(
                    j.fields, queue=queue, status="expired", worker=state.consumer, error=_late(j)
                ),
                "dedup" in j.fields,
                held,
                j.fields.get("flow", ""),
                int(j.fields.get("step") or 0),
                tuple(step_keys(state.stores[partition].keys, j.fields)),
            )
            for j, held, home in zip(timed, holds, homes, strict=True)
        ]
        try:
            server_ms, codes = await state.stores[partition].expire(queue, items, level)
        except ACTOR_FAILURES as exc:
            # Left pending: when the call did expire them they are acknowledged and nothing
            # runs; else they are taken over after the visibility timeout, and run then (the
            # holds a job was granted lapse meanwhile).
            log.warning("redis.error", actor="expire", error=str(exc))
            state.slots.release(len(timed))
            held_back = {j.entry_id for j in timed}
            return [j for j in jobs if j.entry_id not in held_back]
        self._server_clock[partition] = (time.monotonic(), server_ms)
        gone: set[str] = set()
        for job, code, held, home in zip(timed, codes, holds, homes, strict=True):
            if code == Code.OK:
                continue
            gone.add(job.entry_id)
            state.slots.release()
            if code != Code.EXPIRED:
                continue
            if METRICS.on:
                METRICS.jobs.inc((job.task, "expired"))
            jobs_log.warning(
                "job.end",
                execution_id=job.execution_id,
                task=job.task,
                attempt=job.attempt,
                outcome="expired",
                start_deadline_s=job.options.start_deadline,
            )
            if home is not None and job.schedule_id:
                await finish_home(
                    state, home, queue, level, job.schedule_id, job.execution_id,
                    job.attempt, "expired", "", over=True,
                )  # fmt: skip
            if held:
                state.promote_wake.set()  # a released key may start a waiting job
        return [j for j in jobs if j.entry_id not in gone]

    def _deadline_horizon(self, partition: int) -> float:
        """The latest deadline (ms, Redis clock) worth asking the script about now: every one
        until the partition's clock was read lately, then DEADLINE_MARGIN_MS past its now."""
        read = self._server_clock.get(partition)
        if read is None:
            return math.inf
        at, server_ms = read
        age_s = time.monotonic() - at
        if age_s > SERVER_CLOCK_TTL_S:
            return math.inf
        return server_ms + age_s * 1000 + DEADLINE_MARGIN_MS

    def _granted(self, job: Job) -> tuple[tuple[str, str], ...]:
        """The limits (key, template) a job read in partition 0 may hold already: all of them
        when it was granted them while waiting aside; a key it does not hold is skipped by the
        release. Nothing when its keys cannot be filled (it holds nothing then)."""
        state = self.state
        if not state.task_limits and '"limits"' not in job.fields.get("opts", ""):
            return ()
        try:
            held = limits_of(
                state.task_limits.get(job.task, ()), job.payload, job.fields.get("opts")
            )
        except ValueError:
            return ()
        return tuple((lim.key, lim.template) for lim in held)

    def _home(self, job: Job) -> int | None:
        """The partition of a schedule's job that runs from partition 0 (forwarded there
        because it holds limits) when its schedule is in another, else None."""
        partitions = len(self.state.stores)
        if partitions == 1 or job.partition != 0 or not job.schedule_id:
            return None
        home = partition_of(job.schedule_id, partitions)
        return home if home != 0 else None

    async def _forward(self, stream: Stream, jobs: list[Job]) -> None:
        """Jobs holding limits read from another partition go to partition 0's stream of their
        queue and level, where every limit lives (docs/limits.md): the next read there takes
        them. A job is written there once, even when this call is repeated after a crash."""
        state = self.state
        partition, queue, level = stream
        state.slots.release(len(jobs))
        try:
            await state.store.forward(
                state.stores[partition],
                queue,
                level,
                [(j.entry_id, j.execution_id, j.attempt, dict(j.fields)) for j in jobs],
            )
        except ACTOR_FAILURES as exc:
            # Left pending: reclaimed after the visibility timeout, and forwarded then.
            log.warning("redis.error", actor="forward", error=str(exc))

    async def _let_go(self, jobs: list[Job]) -> None:
        """Jobs that hold limits and will not run let go of them."""
        state = self.state
        holds = [(j.execution_id, state.holding.pop(j.execution_id)) for j in jobs
                 if j.execution_id in state.holding]  # fmt: skip
        if not holds:
            return
        try:
            await state.store.release(holds)
        except ACTOR_FAILURES as exc:  # the holds lapse after the visibility timeout
            log.warning("redis.error", actor="release", error=str(exc))

    async def _start_scheduled(self, stream: Stream, jobs: list[Job]) -> set[str]:
        """Mark schedule jobs running, in the partition of each one's schedule (a job holding
        limits may run from partition 0's stream while its schedule is elsewhere: Job.home);
        returns the entry ids of those superseded (acknowledged: not to run)."""
        state = self.state
        partition, queue, level = stream
        by_home: dict[int, list[Job]] = {}
        for job in jobs:
            by_home.setdefault(partition if job.home is None else job.home, []).append(job)
        superseded: set[str] = set()
        for home, group in by_home.items():
            items = [
                (
                    j.entry_id,
                    j.execution_id,
                    j.schedule_id or "",
                    j.attempt,
                    fragment({"worker": state.consumer, "deliveries": j.deliveries}),
                )
                for j in group
            ]
            labels = [text for j in group if (text := j.fields.get("labels"))]
            try:
                codes = await state.stores[home].start(queue, state.consumer, items, level, labels)
                gone = [j for j, c in zip(group, codes, strict=True) if c == Code.SUPERSEDED]
                if gone and home != partition:  # acknowledged in its schedule's partition only
                    await state.stores[partition].drop(queue, level, [j.entry_id for j in gone])
            except ACTOR_FAILURES as exc:
                # Run them anyway: the marker and history are bookkeeping; the job must not wait.
                log.warning("redis.error", actor="start", error=str(exc))
                continue
            for job in gone:
                superseded.add(job.entry_id)
                self._not_run(job, "superseded")
        return superseded

    def _not_run(self, job: Job, reason: str) -> None:
        """A job acknowledged and recorded cancelled by the script that was to start it."""
        self.state.slots.release()
        log.info(
            "job.cancelled",
            execution_id=job.execution_id,
            task=job.task,
            attempt=job.attempt,
            reason=reason,
        )

    async def _start_steps(self, stream: Stream, jobs: list[Job]) -> set[str]:
        """Mark flow steps running (lua/flow_start.lua); returns the entry ids of those whose
        flow ended meanwhile (failed or cancelled: acknowledged and recorded, not to run)."""
        state = self.state
        partition, queue, level = stream
        try:
            codes = await state.stores[partition].start_steps(
                queue, level, [(j.entry_id, j.fields) for j in jobs]
            )
        except ACTOR_FAILURES as exc:
            # Run them: a step of a flow that ended meanwhile runs once more at worst, and its
            # end is recorded once (flow_end.lua); the job must not wait on bookkeeping.
            log.warning("redis.error", actor="start", error=str(exc))
            return set()
        over: set[str] = set()
        for job, code in zip(jobs, codes, strict=True):
            if code == Code.OK:
                continue
            over.add(job.entry_id)
            self._not_run(job, "flow_ended")
        return over

    async def _unknown_task(self, job: Job, fields: dict[str, str]) -> None:
        """A job whose task this worker has no handler for: while another live worker has the
        task, or for ``unknown_task_grace_s`` from its first sighting (a rolling deploy that
        adds the task), it goes back to the delayed set; after that it is dead-lettered."""
        state = self.state
        now = time.time_ns() // 1_000_000
        try:
            first = int(fields.get("unknown_since") or now)
        except ValueError:
            first = now
        grace_ms = round(state.cfg.unknown_task_grace_s * 1000)
        known = job.task in await self._tasks_of_live_workers()
        if not known and now - first >= grace_ms:
            waited = f" (waited {fmt_s(now - first)} for a worker that has it)" if grace_ms else ""
            await self._refuse(
                (job.partition, job.queue, job.priority),
                job.entry_id,
                fields,
                "unknown_task",
                f"no handler registered for task {job.task!r} on worker {state.consumer} "
                f"nor on any live worker{waited}",
            )
            return
        state.slots.release()
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
                grace_s=state.cfg.unknown_task_grace_s,
            )
        try:
            await state.stores[job.partition].retry(
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
            workers = await self.state.store.workers()
        except ACTOR_FAILURES as exc:
            log.warning("redis.error", actor="registry", error=str(exc))
            return tasks
        tasks = {t for w in workers for t in w.tasks} | set(self.state.handlers)
        self._live_tasks = (time.monotonic(), tasks)
        return tasks

    async def _refuse(
        self, stream: Stream, entry_id: str, raw: dict[str, str], reason: str, message: str
    ) -> None:
        """Dead-letter an entry this worker cannot run (malformed, or no handler)."""
        await self.bury(
            stream,
            entry_id,
            raw,
            reason=reason,
            error_type="MalformedJob" if reason == "malformed" else "UnknownTask",
            message=message,
            extra={"reason": reason, "worker": self.state.consumer},
            actor="dead",
        )

    async def bury(
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
        state = self.state
        partition, queue, level = stream
        state.slots.release()
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
            await state.stores[partition].dead(
                queue,
                entry_id,
                raw=raw,
                reason=reason,
                error_type=error_type,
                error_message=message,
                deliveries=deliveries,
                worker=state.consumer,
                extra=fragment(extra),
                priority=level,
                run=run_record(
                    raw,
                    queue=queue,
                    status="dead",
                    worker=state.consumer,
                    error_type=error_type,
                    error=message,
                ),
            )
        except ACTOR_FAILURES as exc:  # left pending: reclaimed and judged again later
            log.warning("redis.error", actor=actor, error=str(exc))


def _of(
    partition: int, found: list[tuple[Lane, list[Entry]]]
) -> list[tuple[int, Lane, list[Entry]]]:
    """Entries read from one partition's streams, with the partition."""
    return [(partition, lane, entries) for lane, entries in found]


def _late(job: Job) -> str:
    """Why an expired job did not run, for the runs log."""
    deadline = job.options.start_deadline or 0
    return f"not started within {duration(deadline * 1000)} of its scheduled time"


def fmt_s(ms: int) -> str:
    """``ms`` as whole seconds for a message."""
    return f"{max(0, ms) // 1000}s"
