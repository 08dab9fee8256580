"""Redis access for single jobs: listing what runs or waits, finding a job by its execution id,
cancelling a waiting one, and reading what its handler returned.

The class is a part of QueueStore (rsched._store.queues); it reads the worker registry to tell
a running job from one whose worker is gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import orjson
from redis.exceptions import ResponseError

from rsched._core.codes import Code, check
from rsched._core.history import fragment
from rsched._core.job import Entry
from rsched._core.keys import GROUP
from rsched._core.rules import NAME_RE, PRIORITIES, Priority, labels_text
from rsched._core.schedule import to_ms
from rsched._core.workers import JobInfo, WorkerInfo, fields_of, job_from_fields
from rsched._store.flow_keys import declared_step_keys
from rsched._store.runs_log import run_index_keys, run_record
from rsched._store.worker_registry import WorkerRegistry

#: Entries read per call while walking a queue stream.
PAGE = 500
#: Entries a lookup by execution id reads at most per stream and per delayed set (find_job.lua).
JOB_SCAN_LIMIT = 10_000


class Jobs(WorkerRegistry):
    """The jobs of one partition's queues, one at a time or a page at a time."""

    history_limit: int
    runs_max_entries: int

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
        # alone), then the runs log and its record of the cancelled job, the activity counters.
        keys += [k.dedup(job.execution_id) if has_dedup else stream, k.runs, k.activity]
        run = run_record(
            {
                "execution_id": job.execution_id,
                "schedule_id": sid or "",
                "task": job.task or "",
                "attempt": str(job.attempt or 1),
                "fired_at": str(to_ms(job.enqueued_at)) if job.enqueued_at else "",
                "labels": labels_text(job.labels),
            },
            queue=job.queue,
            status="cancelled",
            error_type=reason,
        )
        keys += run_index_keys(k, run)
        flow: list[Any] = []
        if job.flow_id and job.flow_step is not None:
            keys += await declared_step_keys(self.redis, k, job.flow_id, job.flow_step)
            flow = [job.flow_id, job.flow_step]
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
                *flow,
            ],
        )
        code = Code(int(res))
        if code == Code.WRONG_TYPE:
            check(res, script="cancel", queue=job.queue)
        return code

    async def result(self, execution_id: str) -> tuple[bool, Any]:
        """(kept, value): what the job's handler returned, while it is kept."""
        raw = await self.redis.get(self.keys.result(execution_id))
        if raw is None:
            return False, None
        try:
            return True, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return True, str(raw)


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
