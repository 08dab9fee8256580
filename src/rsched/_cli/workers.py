"""``rsched`` commands on workers and jobs: ``workers``, ``jobs``, ``job``, ``cancel``, and
``script`` (the scripts a worker written in another language loads, docs/protocol.md)."""

from __future__ import annotations

import argparse
import hashlib
import sys
from datetime import datetime

import anyio
import orjson

from rsched._cli import bulk
from rsched._cli.common import out
from rsched._client.client import Client
from rsched._core import humanize as fmt
from rsched._core.errors import UsageError
from rsched._core.job_logs import JobLogRecord
from rsched._core.schedule import to_ms
from rsched._core.workers import JobInfo, no_worker_for
from rsched._redis import scripts


def _ms(value: datetime | None) -> int | None:
    return to_ms(value) if value is not None else None


async def cmd_workers(client: Client, args: argparse.Namespace) -> None:
    workers = await client.workers()
    now = to_ms(await client.server_time())
    rows = [
        (
            w.id,
            ",".join(w.queues),
            f"{w.running}/{w.concurrency}",
            ",".join(w.tasks)
            if len(w.tasks) <= 4
            else f"{','.join(w.tasks[:3])},+{len(w.tasks) - 3}",
            fmt.relative(_ms(w.started_at), now),
            fmt.relative(_ms(w.last_seen), now),
        )
        for w in workers
    ]
    text = (
        fmt.table(("WORKER", "QUEUES", "RUNNING", "TASKS", "STARTED", "SEEN"), rows)
        if rows
        else "no live worker (none has heartbeated within its last few heartbeats)"
    )
    out(args, {"workers": [w.as_dict() for w in workers]}, text)


async def cmd_jobs(client: Client, args: argparse.Namespace) -> None:
    page = await client.jobs(
        queue=args.queue, state=args.state, limit=args.limit, cursor=args.cursor, labels=args.labels
    )
    now = to_ms(await client.server_time())
    rows = [
        (
            j.execution_id,
            j.queue,
            j.state + ("" if j.priority == "normal" else f" ({j.priority})"),
            j.task,
            j.attempt,
            j.worker or "-",
            fmt.relative(_ms(j.due_at), now)
            if j.state == "delayed"
            else fmt.relative(_ms(j.enqueued_at), now),
            j.waiting or "-",
        )
        for j in page.items
    ]
    what = f"{args.state} jobs" if args.state else "queued, running or delayed jobs"
    headers = ("EXECUTION", "QUEUE", "STATE", "TASK", "ATTEMPT", "WORKER", "SINCE/DUE", "WAITING")
    text = (
        fmt.table(headers, rows)
        if rows
        else f"no {what}" + (f" in queue {args.queue}" if args.queue else "")
    )
    if page.cursor:
        more = ["rsched jobs"]
        if args.queue:
            more.append(f"--queue {args.queue}")
        if args.state:
            more.append(f"--state {args.state}")
        more.append(f"--limit {args.limit} --cursor {page.cursor}")
        text += "\nmore: " + " ".join(more)
    out(args, {"jobs": [j.as_dict() for j in page.items], "cursor": page.cursor}, text)


def _job_text(job: JobInfo, now: int) -> str:
    pairs: list[tuple[str, object]] = [
        ("execution_id", job.execution_id),
        ("state", job.state),
        ("queue", job.queue or "-"),
        ("task", job.task or "-"),
        ("priority", job.priority),
        ("attempt", job.attempt if job.attempt is not None else "-"),
        ("schedule", job.schedule_id or "-"),
        ("worker", job.worker or "-"),
    ]
    if job.progress is not None:
        note = f"  {job.progress.note}" if job.progress.note else ""
        pairs.append(("progress", f"{job.progress.fraction:.0%}{note}"))
    if job.waiting:
        pairs.insert(2, ("waiting", job.waiting))
    if job.limit:
        pairs.insert(3 if job.waiting else 2, ("limit", job.limit))
    for name, value in (
        ("enqueued", job.enqueued_at),
        ("started", job.started_at),
        ("due", job.due_at),
    ):
        if value is not None:
            pairs.append((name, f"{fmt.clock(to_ms(value))}  {fmt.relative(to_ms(value), now)}"))
    if job.payload is not None:
        pairs.append(("payload", orjson.dumps(job.payload).decode()))
    pairs.append(("result", "-" if job.result is None else orjson.dumps(job.result).decode()))
    text = fmt.fields(pairs)
    if job.history:
        rows = [
            (
                fmt.clock(to_ms(e.at)),
                e.event,
                e.attempt if e.attempt is not None else "",
                e.reason or e.error or "",
            )
            for e in job.history
        ]
        text += "\n\nhistory (newest first):\n" + fmt.table(
            ("AT", "EVENT", "ATTEMPT", "DETAIL"), rows
        )
    return text


async def cmd_job(client: Client, args: argparse.Namespace) -> None:
    if args.follow or args.attempt is not None:
        args.logs = True
    if args.logs:
        await _logs(client, args)
        return
    job = await client.job(args.execution_id)
    now = to_ms(await client.server_time())
    out(args, job.as_dict(), _job_text(job, now))


async def _logs(client: Client, args: argparse.Namespace) -> None:
    """``rsched job ID --logs [--follow]``: the job's log; following, new lines as they come
    (and progress changes) until the job ends."""
    job = await client.job(args.execution_id)
    records = await client.job_logs(args.execution_id, args.attempt)
    if not args.follow:
        if getattr(args, "json", False):
            out(args, [r.as_dict() for r in records], "")
        else:
            print("\n".join(_log_line(r) for r in records) if records else "no log lines")
        return
    if not getattr(args, "json", False):
        print(f"-- following {args.execution_id} ({job.state}); Ctrl-C stops", flush=True)
    _print_logs(args, records)
    last = records[-1] if records else None
    progress = job.progress
    as_json = getattr(args, "json", False)
    ended = False
    while True:
        await anyio.sleep(FOLLOW_POLL_S)
        job = await client.job(args.execution_id)
        if job.progress != progress and job.progress is not None and not as_json:
            p = job.progress
            print(f"-- progress {p.fraction:.0%}" + (f" {p.note}" if p.note else ""), flush=True)
        progress = job.progress
        records = await client.job_logs(args.execution_id, args.attempt)
        fresh = _after(records, last)
        _print_logs(args, fresh)
        last = fresh[-1] if fresh else last
        if ended:
            if not as_json:
                print(f"-- {job.state}", flush=True)
            return
        # The worker writes what a handler said a little after its end: one more read.
        ended = job.state in ENDED


#: A job in one of these states writes no more log lines.
ENDED = frozenset({"completed", "dead", "cancelled", "expired"})
#: How often ``--follow`` reads the log (the worker writes it every 0.3 s at most).
FOLLOW_POLL_S = 1.0


def _after(records: list[JobLogRecord], last: JobLogRecord | None) -> list[JobLogRecord]:
    """The records after ``last`` (the newest printed), as the log holds them now."""
    if last is None:
        return records
    for i in range(len(records) - 1, -1, -1):
        if records[i] == last:
            return records[i + 1 :]
    return [r for r in records if (r.attempt, r.at) > (last.attempt, last.at)]


def _log_line(record: JobLogRecord) -> str:
    at = record.at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return f"{at} #{record.attempt} {record.level:<8} {record.message}"


def _print_logs(args: argparse.Namespace, records: list[JobLogRecord]) -> None:
    for record in records:
        if getattr(args, "json", False):
            sys.stdout.write(orjson.dumps(record.as_dict()).decode() + "\n")
        else:
            print(_log_line(record))
    sys.stdout.flush()


async def cmd_cancel(client: Client, args: argparse.Namespace) -> None:
    ids = args.execution_ids
    bulk.check_targets(args, ids, "job")
    if bulk.has_filter(args) or args.dry_run or len(ids) > 1:

        async def select() -> list[str]:
            if ids:
                return list(dict.fromkeys(ids))
            return await client.select_jobs(labels=args.labels, task=args.task, queue=args.queue)

        await bulk.by_filter(client, args, select, client.cancel_many, "cancel", "job")
        return
    (execution_id,) = ids
    state = await client.cancel(execution_id)
    if state == "running":
        text = f"asked the worker running {execution_id} to cancel it"
    else:
        text = f"cancelled {execution_id} ({state}: removed from its queue)"
    out(args, {"execution_id": execution_id, "was": state}, text)


async def warn_if_no_worker_has(client: Client, task: str, queue: str) -> None:
    """``rsched add``'s and ``enqueue``'s note (stderr, not an error) when no live worker would
    run ``task`` from ``queue``."""
    workers = await client.workers()
    missing = no_worker_for(queue, task, workers)
    if missing is not None:
        sys.stderr.write(
            f"warning: {missing} ({len(workers)} live worker(s)); its jobs wait until one does, "
            "and a worker of the queue without the task dead-letters them (unknown_task) after "
            "its worker.unknown_task_grace_s (rsched workers lists them; rsched job ID says "
            "why a job waits)\n"
        )


def cmd_script(args: argparse.Namespace) -> None:
    """Print a script of lua/ as rsched sends it (includes inlined, under its shebang), byte for
    byte, or its SHA1 (``--sha``: the EVALSHA name rsched uses), or with no name the names of
    every script. A worker written in another language ships these texts (docs/protocol.md).
    Needs no Redis."""
    available = scripts.names()
    if args.name is None:
        sys.stdout.write("".join(f"{name}\n" for name in available))
        return
    if args.name not in available:
        raise UsageError(f"NAME: no script {args.name!r}; give one of {', '.join(available)}")
    text = scripts.source(args.name)
    # Unchanged (no newline added): the printed text loads under rsched's own SHA1.
    sys.stdout.write(hashlib.sha1(text.encode()).hexdigest() + "\n" if args.sha else text)
