"""A Django TaskResult from what rsched knows of a job: where it is (``Client.job``), its
attempts (``Client.job_attempts``, the runs log) and, for one that failed for good, its dead
letter (the traceback).

Status: waiting (queued, delayed, on a limit) is READY, running RUNNING, completed SUCCESSFUL,
failed / dead / expired FAILED, cancelled the framework's CANCELLED where it has one (FAILED
otherwise). A job read after it ended has lost its arguments (rsched keeps a finished job's
outcome, not its payload): ``args`` and ``kwargs`` are then empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from rsched import DeadLetter, JobInfo, RunRecord, SyncClient
from rsched.contrib.django._framework import (
    CANCELLED,
    FAILED,
    READY,
    RUNNING,
    SUCCESSFUL,
    Task,
    TaskError,
    TaskResult,
)

_STATUS = {
    "queued": READY,
    "delayed": READY,
    "waiting": READY,
    "running": RUNNING,
    "completed": SUCCESSFUL,
    "failed": FAILED,
    "dead": FAILED,
    "expired": FAILED,
    "cancelled": CANCELLED,
}
#: The runs log's records of an attempt that ended in an error.
_FAILED_RUNS = frozenset({"failed", "timed_out", "dead"})
#: The runs log's records of an attempt that a worker ran.
_RAN = frozenset({"completed", "failed", "timed_out", "retried", "dead", "cancelled"})
#: The job states of a job that ended (each of its attempts has its record in the runs log).
_ENDED = frozenset({"completed", "failed", "dead", "expired", "cancelled"})
#: How many of a queue's newest dead letters of the task are searched for the job's traceback.
DEAD_LETTERS_SEARCHED = 200


def task_result(
    client: SyncClient, task: Task[Any, Any], alias: str, info: JobInfo
) -> TaskResult[Any]:
    """The TaskResult of the job ``info`` of ``task`` run by backend ``alias``."""
    # The runs log holds one record per attempt that ended: asking for no more than that many
    # ends the newest-first scan at the oldest of them, instead of reading the whole log.
    attempt = info.attempt or 1
    ended_attempts = attempt if info.state in _ENDED else attempt - 1
    found = client.job_attempts(info.execution_id, ended_attempts) if ended_attempts else []
    records = [r for r in reversed(found) if r.status in _RAN]  # oldest first
    ended = [r for r in records if r.ended_at is not None]
    starts = [r.started_at for r in records if r.started_at is not None]
    if info.started_at is not None and info.started_at not in starts:
        starts.append(info.started_at)
    status = _STATUS.get(info.state, READY)
    payload = info.payload or {}
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=info.execution_id,
        status=status,
        enqueued_at=info.enqueued_at or _first(r.fired_at for r in records),
        started_at=min(starts, default=None),
        finished_at=ended[-1].ended_at if ended and status != READY else None,
        last_attempted_at=max(starts, default=None),
        args=list(payload.get("args", [])),
        kwargs=dict(payload.get("kwargs", {})),
        backend=alias,
        errors=_errors(client, info, ended),
        worker_ids=_workers(records, info),
    )
    if status == SUCCESSFUL:
        object.__setattr__(result, "_return_value", info.result)
    return result


def _first(times: Iterable[datetime | None]) -> datetime | None:
    return next((t for t in times if t is not None), None)


def _workers(records: list[RunRecord], info: JobInfo) -> list[str]:
    """One worker id per attempt that ran (the attempt running now included; not one
    cancelled before it started)."""
    attempts: dict[int | None, str] = {}
    for r in records:
        if r.worker:
            attempts[r.attempt] = r.worker
    if info.state == "running":
        attempts[info.attempt] = info.worker or ""
    return list(attempts.values())


def _errors(client: SyncClient, info: JobInfo, ended: list[RunRecord]) -> list[TaskError]:
    """One TaskError per failed attempt, the last one with its traceback when the job's dead
    letter is among the newest of its queue."""
    failed = [r for r in ended if r.status in _FAILED_RUNS]
    letter = _dead_letter(client, info, failed[-1]) if failed and info.state == "dead" else None
    errors = []
    for r in failed:
        error_type, message = r.error_type or "Exception", r.error or ""
        tb = f"{error_type}: {message}" if message else error_type
        path = error_type if "." in error_type else f"builtins.{error_type}"
        if letter is not None and r is failed[-1] and letter.traceback:
            tb = letter.traceback
            path = class_path(letter.traceback, error_type) or path
        errors.append(TaskError(exception_class_path=path, traceback=tb))
    return errors


def _dead_letter(client: SyncClient, info: JobInfo, last: RunRecord) -> DeadLetter | None:
    for n, letter in enumerate(client.iter_dead_letters(last.queue, task=last.task)):
        if letter.execution_id == info.execution_id:
            return letter
        if n + 1 >= DEAD_LETTERS_SEARCHED:
            break
    return None


def class_path(traceback: str, error_type: str) -> str | None:
    """The dotted path of the exception a formatted traceback ends with (its last line names
    it as ``module.Qualname: message``, a builtin as ``Qualname: message``); None when the
    traceback does not end with an ``error_type``."""
    for line in reversed(traceback.splitlines()):
        if not line or line[0].isspace():
            continue
        head = line.split(":", 1)[0].strip()
        if head == error_type:
            return f"builtins.{head}"
        if head.endswith(f".{error_type}"):
            return head
    return None
