"""Live workers and the jobs they can see, as typed records (pure: no Redis here).

A worker writes one JSON record per heartbeat (see lua/register.lua and docs/keys.md);
:class:`WorkerInfo` reads it. :class:`JobInfo` is one job wherever it is: waiting in its
queue's stream, running on a worker, delayed (a retry or a delayed enqueue), or finished (its
schedule's history, the runs log and its kept result say how).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import orjson

from rsched._core.flows import FLOW_TASK
from rsched._core.history import HistoryEvent
from rsched._core.job_logs import JobProgress
from rsched._core.rules import read_labels

JobState = Literal[
    "queued",
    "running",
    "delayed",
    "waiting",
    "completed",
    "failed",
    "dead",
    "cancelled",
    "expired",
]
#: The states ``Client.jobs`` lists (the others are read by execution id only).
LISTED_STATES: tuple[str, ...] = ("running", "queued", "delayed")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The history events that end a job, and the state each leaves it in.
_ENDS: dict[str, JobState] = {
    "completed": "completed",
    "dead": "dead",
    "cancelled": "cancelled",
    "failed": "failed",
    "timed_out": "failed",
    "expired": "expired",
}


def at_ms(ms: int) -> datetime:
    """Epoch ms -> aware UTC datetime (exact)."""
    return _EPOCH + timedelta(milliseconds=ms)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job a live worker runs, as its registry record lists it."""

    execution_id: str
    queue: str
    priority: str
    entry_id: str
    task: str
    attempt: int
    started_at: datetime


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One live worker, from the worker registry (see :meth:`rsched.Client.workers`).

    ``id`` is the worker's consumer name on the queues' groups (``host:pid:random``);
    ``running`` counts the jobs it runs now (``jobs`` lists them); ``last_seen`` is its last
    heartbeat (Redis time), at most a few ``heartbeat_s`` ago. Datetimes are aware UTC.
    """

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    tasks: tuple[str, ...]
    concurrency: int
    running: int
    started_at: datetime
    last_seen: datetime
    heartbeat_s: float
    jobs: tuple[RunningJob, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: datetimes in ISO 8601."""
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "queues": list(self.queues),
            "tasks": list(self.tasks),
            "concurrency": self.concurrency,
            "running": self.running,
            "started_at": self.started_at.isoformat(),
            "last_seen": self.last_seen.isoformat(),
            "heartbeat_s": self.heartbeat_s,
            "jobs": [
                {
                    "execution_id": j.execution_id,
                    "queue": j.queue,
                    "priority": j.priority,
                    "entry_id": j.entry_id,
                    "task": j.task,
                    "attempt": j.attempt,
                    "started_at": j.started_at.isoformat(),
                }
                for j in self.jobs
            ],
        }


def worker_record(
    *,
    worker_id: str,
    host: str,
    pid: int,
    queues: list[str],
    tasks: list[str],
    concurrency: int,
    started_ms: int,
    heartbeat_s: float,
    jobs: Sequence[tuple[str, str, str, str, str, int, int]],
) -> bytes:
    """The JSON record a worker registers (``jobs``: execution id, queue, level, entry id,
    task, attempt, started ms)."""
    return orjson.dumps(
        {
            "id": worker_id,
            "host": host,
            "pid": pid,
            "queues": queues,
            "tasks": tasks,
            "concurrency": concurrency,
            "started_ms": started_ms,
            "heartbeat_s": heartbeat_s,
            "running": len(jobs),
            "jobs": jobs,
        }
    )


def parse_worker(raw: str | bytes, last_seen_ms: int) -> WorkerInfo | None:
    """A registry record as a :class:`WorkerInfo`; None when it is not one (skipped)."""
    try:
        doc = orjson.loads(raw)
        jobs = tuple(
            RunningJob(str(e), str(q), str(lv), str(eid), str(t), int(a), at_ms(int(s)))
            for e, q, lv, eid, t, a, s in doc.get("jobs") or []
        )
        return WorkerInfo(
            id=str(doc["id"]),
            host=str(doc.get("host", "")),
            pid=int(doc.get("pid", 0)),
            queues=tuple(str(q) for q in doc.get("queues") or []),
            tasks=tuple(str(t) for t in doc.get("tasks") or []),
            concurrency=int(doc.get("concurrency", 0)),
            running=int(doc.get("running", len(jobs))),
            started_at=at_ms(int(doc.get("started_ms", last_seen_ms))),
            last_seen=at_ms(last_seen_ms),
            heartbeat_s=float(doc.get("heartbeat_s", 0)),
            jobs=jobs,
        )
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One job, wherever it is (see :meth:`rsched.Client.jobs` and :meth:`~rsched.Client.job`).

    ``state``: ``queued`` (in its queue's stream, not yet read; or read by a worker that is
    gone, a forced stop's or one no longer in the worker registry, until another worker takes
    it over), ``running`` (read by ``worker``, a live one), ``delayed`` (a retry or a delayed
    enqueue, due at ``due_at``), ``waiting`` (aside, on the limit key ``limit``: it starts
    when the key lets it, docs/limits.md), or, for a job read by execution id after it ended,
    ``completed``, ``failed`` (its last attempt failed and the next is not written yet),
    ``dead``, ``cancelled`` or ``expired`` (not started within its start deadline: never run)
    (from its schedule's history, the runs log, or its kept result).
    ``priority`` is its level (``high``, ``normal``, ``low``), in every state.
    ``enqueued_at`` is when its current attempt entered the stream; ``started_at`` when its
    current attempt started (running), or its last one (ended; None for a job that never ran).
    ``history`` holds the events of this execution (newest first) when it belongs to a
    schedule; ``result`` what its handler returned (kept ``result_ttl_s``; None when nothing
    was kept). ``waiting`` says why a queued or delayed job waits, when rsched can tell (no
    live worker reads its queue or has its task, a worker without the task holds it back, a
    retry's backoff, a delayed enqueue); None for one that just waits its turn. ``progress``
    is the latest its handler reported (``Job.set_progress``; None: none, or expired with its
    result). ``labels`` are those it was enqueued with (docs/labels.md). Datetimes are aware UTC.
    """

    execution_id: str
    state: JobState
    queue: str | None = None
    task: str | None = None
    priority: str = "normal"
    attempt: int | None = None
    schedule_id: str | None = None
    entry_id: str | None = None
    worker: str | None = None
    enqueued_at: datetime | None = None
    started_at: datetime | None = None
    due_at: datetime | None = None
    waiting: str | None = None
    limit: str | None = None
    deliveries: int | None = None
    payload: dict[str, Any] | None = None
    result: Any = None
    history: tuple[HistoryEvent, ...] = field(default=(), hash=False)
    progress: JobProgress | None = None
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    flow_id: str | None = None
    flow_step: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: datetimes in ISO 8601, history as event dicts."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif name == "history":
                value = [event.as_dict() for event in value]
            elif name == "progress" and value is not None:
                value = value.as_dict()
            out[name] = value
        return out


def job_from_fields(
    state: JobState,
    queue: str,
    fields: dict[str, str],
    *,
    priority: str = "normal",
    entry_id: str | None = None,
    worker: str | None = None,
    due_ms: int | None = None,
    deliveries: int | None = None,
    workers: Sequence[WorkerInfo] | None = None,
    started_ms: int | None = None,
) -> JobInfo:
    """A :class:`JobInfo` from a job's stored fields (stream entry or delayed member); with
    the live ``workers``, why it waits."""
    try:
        payload = orjson.loads(fields.get("payload") or "{}")
    except orjson.JSONDecodeError:
        payload = None
    try:
        attempt: int | None = int(fields.get("attempt") or "1")
    except ValueError:
        attempt = None
    enqueued = None
    if entry_id and entry_id.split("-")[0].isdigit():
        enqueued = at_ms(int(entry_id.split("-")[0]))
    job = JobInfo(
        execution_id=fields.get("execution_id", ""),
        state=state,
        queue=queue,
        task=fields.get("task"),
        priority=fields.get("priority") or priority,
        attempt=attempt,
        schedule_id=fields.get("schedule_id") or None,
        entry_id=entry_id,
        worker=worker,
        enqueued_at=enqueued,
        started_at=at_ms(started_ms) if started_ms is not None else None,
        due_at=at_ms(due_ms) if due_ms is not None else None,
        deliveries=deliveries,
        payload=payload if isinstance(payload, dict) else None,
        labels=read_labels(fields.get("labels")),
        flow_id=fields.get("flow") or None,
        flow_step=int(fields["step"]) if fields.get("step", "").isdigit() else None,
    )
    if workers is None:
        return job
    return dataclasses.replace(job, waiting=waiting_reason(job, fields, workers))


def no_worker_for(queue: str, task: str, workers: Sequence[WorkerInfo]) -> str | None:
    """Why no live worker would run a job of ``task`` on ``queue`` now; None when one would."""
    readers = [w for w in workers if queue in w.queues]
    if not readers:
        return f"no live worker reads queue {queue!r}" + ("" if workers else " (none is live)")
    if task != FLOW_TASK and not any(task in w.tasks for w in readers):  # every worker has it
        return f"no live worker of queue {queue!r} has task {task!r}"
    return None


def waiting_reason(
    job: JobInfo, fields: Mapping[str, str], workers: Sequence[WorkerInfo]
) -> str | None:
    """Why a queued or delayed job waits, as far as its fields and the live workers tell."""
    if job.state not in ("queued", "delayed") or job.queue is None or job.task is None:
        return None
    missing = no_worker_for(job.queue, job.task, workers)
    since = fields.get("unknown_since", "")
    if since.isdigit():  # read by a worker without the task (rsched._worker.reader)
        held = (
            f"a worker of queue {job.queue!r} without task {job.task!r} holds it back since "
            f"{at_ms(int(since)).isoformat(timespec='seconds')}"
        )
        if missing:
            return (
                f"{missing}: {held}, and dead-letters it (unknown_task) once "
                "worker.unknown_task_grace_s (10m by default) has passed"
            )
        return f"{held}; a live worker has the task now"
    if missing:
        return f"{missing}; it waits until one does"
    if job.state == "delayed":
        return (
            "a retry, after its attempt failed"
            if (job.attempt or 1) > 1
            else "enqueued with a delay"
        )
    return None


def state_from_history(events: list[HistoryEvent]) -> JobState | None:
    """The state an execution's history (newest first) leaves it in, when it ended."""
    for event in events:
        if event.event in _ENDS:
            return _ENDS[event.event]
        if event.event in ("running", "retried", "fired", "released"):
            return None
    return None


def fields_of(flat: list[Any]) -> dict[str, str]:
    """``[field, value, …]`` -> dict."""
    return {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
