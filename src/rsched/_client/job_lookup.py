"""Finding one job and cancelling it (:meth:`Client.job`, :meth:`Client.cancel`).

A job is looked for where it can be, in order: waiting or delayed in its queue's stream and
delayed set, running in the worker registry, then ended, as its schedule's history, the runs
log's newest record and its kept result tell. Each place holds only part of the story (the
registry knows a running attempt's exact start, the history knows a job whose runs log record
was trimmed), so the answer combines them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from rsched._core.codes import Code
from rsched._core.errors import JobNotFound
from rsched._core.flows import flow_of
from rsched._core.history import HistoryEvent, page_events
from rsched._core.rules import PAGE_MAX
from rsched._core.schedule import from_ms
from rsched._core.workers import JobInfo, JobState, WorkerInfo, state_from_history
from rsched._store.queues import QueueStore
from rsched._store.runs_log import RunFilter, read_runs
from rsched._store.schedules import ScheduleStore

#: A job's state from the runs log's newest record of it (a retried attempt is recorded once it
#: is written to the delayed set, so a job not found there failed for good or is beyond the scan).
_RUN_ENDS: dict[str, JobState] = {
    "completed": "completed",
    "dead": "dead",
    "cancelled": "cancelled",
    "failed": "failed",
    "timed_out": "failed",
    "retried": "failed",
    "expired": "expired",
}


async def find(
    store: QueueStore,
    workers: list[WorkerInfo],
    schedules: Callable[[str], Awaitable[ScheduleStore]],
    history_limit: int,
    execution_id: str,
) -> JobInfo:
    """The job ``execution_id`` of the partition ``store`` serves, with its schedule's history of
    this execution and its kept result (``schedules`` gives a schedule's store). Raises
    JobNotFound."""
    queues = await store.queue_names()
    found = await store.find_job(execution_id, queues, workers)
    job = found[0] if found else await _waiting(store, execution_id)
    if job is None:  # it may have moved between the reads (from waiting back to its stream)
        found = await store.find_job(execution_id, queues, workers)
        job = found[0] if found else None
    sid = job.schedule_id if job else schedule_of(execution_id)
    history: tuple[HistoryEvent, ...] = ()
    if sid:
        stored = await (await schedules(sid)).history(sid, history_limit)
        events = page_events(stored, limit=PAGE_MAX, cursor=None, status=None).items
        history = tuple(e for e in events if e.execution_id == execution_id)
    kept, result = await store.result(execution_id)
    if job is None:
        job = await _ended(store, execution_id, sid, history, kept)
    if job is None or job.state == "running":
        # The registry record of its worker says when it started; a job no lookup found
        # may run deeper in its stream than the lookup reads.
        job = listed(job, execution_id, workers)
    if job is None:
        raise JobNotFound(
            execution_id,
            "it does not wait, run or have a kept outcome (finished jobs are known by "
            "their schedule's history, the runs log's last 10,000 records and their "
            "kept result)",
        )
    progress = await store.job_progress(execution_id)
    step = flow_of(execution_id)  # an ended step's record does not name its flow: its id does
    return dataclasses.replace(
        job,
        history=history,
        result=result,
        progress=progress,
        flow_id=step[0] if step else None,
        flow_step=step[1] if step else None,
    )


async def cancel(store: QueueStore, registry: QueueStore, execution_id: str) -> str:
    """Cancel a waiting job in ``store``, or ask its worker (through ``registry``) to cancel a
    running one; returns the state it was cancelled in. Raises JobNotFound."""
    if await store.cancel_limited(execution_id):
        return "waiting"
    for _ in range(3):
        found = await store.find_job(execution_id, await store.queue_names())
        if found is not None and found[0].state != "running":
            code = await store.cancel_waiting(found[0], found[1], reason="cancelled")
            if code == Code.OK:
                return found[0].state
            continue  # read or moved meanwhile: look again
        running = found is not None or any(
            run.execution_id == execution_id
            for worker in await registry.workers()
            for run in worker.jobs
        )
        if running:
            await registry.cancel_running(execution_id)
            return "running"
        break
    raise JobNotFound(execution_id, "it does not wait or run (finished, or never existed)")


async def _waiting(store: QueueStore, execution_id: str) -> JobInfo | None:
    """A job waiting aside on a limit key (docs/limits.md), or None."""
    rec = await store.waiting_job(execution_id)
    return None if rec is None else waiting_info(execution_id, rec)


def waiting_info(execution_id: str, rec: dict[str, Any]) -> JobInfo | None:
    """A job waiting on a limit key, from its record in the limits' jobs hash (None: not a
    record rsched wrote)."""
    if not isinstance(rec.get("f"), list):
        return None
    flat = [str(v) for v in rec["f"]]
    fields = dict(zip(flat[::2], flat[1::2], strict=False))
    queue, _, level = str(rec.get("s", "")).partition(":queue:")[2].partition("#")
    key = str(rec.get("k", ""))
    try:
        payload = orjson.loads(fields.get("payload", "{}"))
    except orjson.JSONDecodeError:
        payload = None
    since = rec.get("t")
    attempt = fields.get("attempt", "1")
    return JobInfo(
        execution_id,
        "waiting",
        queue=queue or None,
        task=fields.get("task"),
        priority=level or "normal",
        attempt=int(attempt) if attempt.isdigit() else None,
        schedule_id=fields.get("schedule_id") or None,
        enqueued_at=from_ms(int(since)) if isinstance(since, int) else None,
        waiting=f"waits on limit key {key!r} until it lets another job start",
        limit=key,
        payload=payload if isinstance(payload, dict) else None,
    )


async def _ended(
    store: QueueStore,
    execution_id: str,
    sid: str | None,
    history: tuple[HistoryEvent, ...],
    kept: bool,
) -> JobInfo | None:
    """A job that neither waits nor runs, as its newest runs log record (queue, task,
    priority, worker and start of its last attempt), its schedule's history and its kept
    result tell; None when none of them knows it."""
    newest = await read_runs(
        store.redis,
        store.keys,
        RunFilter(execution_id=execution_id),
        limit=1,
        cursor="+",  # records only: it is not waiting or running
    )
    ended = newest.items[0] if newest.items else None
    state = state_from_history(list(history)) or (_RUN_ENDS.get(ended.status) if ended else None)
    state = state or ("completed" if kept else None)
    if state is None:
        return None
    last = history[0] if history else None
    attempt = last.attempt if last else (ended.attempt if ended else None)
    # A record trimmed from the log: the history's running event of that attempt.
    began = next((e for e in history if e.event == "running" and e.attempt == attempt), None)
    return JobInfo(
        execution_id,
        state,
        queue=ended.queue if ended else None,
        task=ended.task if ended else None,
        priority=ended.priority if ended else "normal",
        schedule_id=sid if history else (ended.schedule_id if ended else None),
        attempt=attempt,
        worker=ended.worker if ended else None,
        started_at=ended.started_at if ended else (began.at if began else None),
    )


def listed(job: JobInfo | None, execution_id: str, workers: list[WorkerInfo]) -> JobInfo | None:
    """``job`` (running) as the registry record of its worker lists it (its exact start), or
    a job no lookup found (None) as a live worker's record lists it; else ``job`` itself."""
    holder = job.worker if job is not None and job.state == "running" else None
    for worker in workers:
        if holder is not None and worker.id != holder:
            continue
        for run in worker.jobs:
            if run.execution_id == execution_id:
                return dataclasses.replace(
                    job or JobInfo(execution_id, "running", queue=run.queue),
                    state="running",
                    task=run.task,
                    priority=run.priority,
                    attempt=run.attempt,
                    entry_id=run.entry_id,
                    worker=worker.id,
                    started_at=run.started_at,
                )
    return job


def schedule_of(execution_id: str) -> str | None:
    """The schedule of a fired occurrence's execution id (``<schedule id>@<time>``)."""
    sid, at, rest = execution_id.rpartition("@")
    return sid if at and sid and rest else None
