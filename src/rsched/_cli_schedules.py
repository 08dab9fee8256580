"""``rsched`` commands on schedules: add, upsert, rm, pause, resume, trigger, ls, show, next,
history, backfill and sync."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from rsched import _format as fmt
from rsched._cli_common import json_object, out, status_text, trigger_text, when
from rsched._client import Client
from rsched._connection import connect
from rsched._declare import sync_file
from rsched._errors import UsageError
from rsched._model import Schedule, to_ms

#: The spec options of ``add`` / ``upsert`` (argparse dests), copied into the spec when given.
SPEC_OPTIONS = (
    "task", "cron", "every", "at", "timezone", "queue", "payload", "start_at", "end_at",
    "max_runs", "max_retries", "retry_base_s", "retry_multiplier", "retry_max_s",
    "retry_jitter", "timeout_s", "overlap", "misfire", "catch_up_limit", "misfire_grace_s",
    "description", "paused",
)  # fmt: skip
_TRIGGERS = ("cron", "every", "at")


def _spec_from_args(args: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if args.file:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        try:
            data = json_object(text)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--file {args.file}: {exc}") from None
    if args.id:
        data["id"] = args.id
    given = {n: getattr(args, n) for n in SPEC_OPTIONS if getattr(args, n) is not None}
    if any(t in given for t in _TRIGGERS):  # a trigger option replaces the file's trigger
        for t in _TRIGGERS:
            data.pop(t, None)
    data.update(given)
    if "id" not in data:
        raise UsageError("give the schedule id (rsched add ID …) or an 'id' in --file")
    return data


async def _write(client: Client, args: argparse.Namespace, *, upsert: bool) -> None:
    s = await (client.upsert if upsert else client.add)(_spec_from_args(args))
    now = to_ms(await client.server_time())
    verb = "upserted" if upsert else "added"
    out(
        args,
        s.public_dict(),
        f"{verb} {s.id} (generation {s.generation}); next run {when(s.next_run, s.timezone, now)}",
    )


async def cmd_add(client: Client, args: argparse.Namespace) -> None:
    await _write(client, args, upsert=False)


async def cmd_upsert(client: Client, args: argparse.Namespace) -> None:
    await _write(client, args, upsert=True)


async def cmd_rm(client: Client, args: argparse.Namespace) -> None:
    for sid in args.ids:
        await client.remove(sid)
    out(args, {"removed": args.ids}, "\n".join(f"removed {sid}" for sid in args.ids))


async def cmd_pause(client: Client, args: argparse.Namespace) -> None:
    await client.pause(args.id, args.note)
    out(args, {"paused": args.id}, f"paused {args.id}")


async def cmd_resume(client: Client, args: argparse.Namespace) -> None:
    await client.resume(args.id)
    s = await client.get(args.id)
    now = to_ms(await client.server_time())
    out(args, s.public_dict(), f"resumed {args.id}; next run {when(s.next_run, s.timezone, now)}")


async def cmd_trigger(client: Client, args: argparse.Namespace) -> None:
    fired = await client.trigger(args.id)
    out(
        args,
        {"execution_id": fired.execution_id, "status": fired.status},
        f"{fired.status} {fired.execution_id}"
        + ("" if fired.status == "fired" else " (the previous run is unfinished: overlap policy)"),
    )


async def cmd_ls(client: Client, args: argparse.Namespace) -> None:
    schedules: list[Schedule] = []
    cursor = args.cursor
    while True:
        page = await client.list(
            queue=args.queue, task=args.task, paused=args.paused, limit=args.limit, cursor=cursor
        )
        schedules += page.schedules
        cursor = page.cursor
        if not (args.all and cursor):
            break
    now = to_ms(await client.server_time())
    rows = [
        (
            s.id,
            s.task,
            s.queue,
            trigger_text(s),
            status_text(s),
            when(s.next_run, s.timezone, now) if not s.paused else "-",
            fmt.relative(to_ms(s.last_run) if s.last_run is not None else None, now),
            s.runs,
        )
        for s in schedules
    ]
    headers = ("ID", "TASK", "QUEUE", "TRIGGER", "STATUS", "NEXT RUN", "LAST RUN", "RUNS")
    text = fmt.table(headers, rows) if schedules else "no schedules"
    if cursor:
        text += f"\nmore: rsched ls --cursor '{cursor}' (or --all)"
    out(args, {"schedules": [s.public_dict() for s in schedules], "cursor": cursor}, text)


def _runs(history: list[dict[str, Any]], zone: str, now: int) -> tuple[list[Any], list[Any]]:
    """Rows (scheduled, lateness, origin, outcome, execution id) of the last runs."""
    outcome: dict[str, str] = {}
    for event in history:  # newest first: the first outcome seen is the latest
        exec_id = event.get("execution_id")
        name = event.get("event", "")
        if exec_id and name not in ("fired", "buffered", "skipped") and exec_id not in outcome:
            outcome[exec_id] = name
    rows, data = [], []
    for event in history:
        name = event.get("event", "")
        if name not in ("fired", "skipped", "misfired", "buffered"):
            continue
        exec_id = event.get("execution_id", "")
        result = outcome.get(exec_id, "queued") if name == "fired" else name
        if name == "skipped" and event.get("reason"):
            result = f"skipped ({event['reason']})"
        late = event.get("late_ms")
        sched = event.get("scheduled_at")
        rows.append(
            (
                fmt.when(int(sched), zone, now) if sched is not None else "-",
                fmt.duration(late) if late is not None else "-",
                event.get("origin", name),
                result,
                exec_id or "-",
            )
        )
        data.append({**event, "outcome": result})
        if len(rows) == 10:
            break
    return rows, data


async def cmd_show(client: Client, args: argparse.Namespace) -> None:
    s = await client.get(args.id)
    upcoming = await client.next_runs(args.id, 5)
    history = await client.history(args.id, limit=client.settings.history_limit)
    now = to_ms(await client.server_time())
    zone = s.timezone
    runs = f"{s.runs}" + (f" of {s.max_runs}" if s.max_runs else "")
    pairs: list[tuple[str, object]] = [
        ("id", s.id),
        ("task", s.task),
        ("queue", s.queue),
        ("trigger", trigger_text(s)),
        ("timezone", zone),
        ("payload", orjson.dumps(s.payload).decode()),
        ("status", status_text(s) + (f" ({s.pause_note})" if s.pause_note else "")),
        ("next run", when(s.next_run, zone, now) if not s.paused else "-"),
        ("last run", when(s.last_run, zone, now)),
        ("runs", runs),
        ("generation", s.generation),
        ("window", f"{s.start_at or '-'} .. {s.end_at or '-'}"),
        ("overlap", s.overlap),
        ("misfire", f"{s.misfire} (grace {fmt.duration(s.misfire_grace_s * 1000)})"),
        (
            "retries",
            f"{s.max_retries}, backoff {s.retry_base_s:g}s x{s.retry_multiplier:g} up to "
            f"{s.retry_max_s:g}s",
        ),
        ("timeout", fmt.duration(s.timeout_s * 1000)),
        ("source", s.source or "sdk/cli"),
        ("created", when(s.created_at, zone, now)),
        ("updated", when(s.updated_at, zone, now)),
    ]
    if s.description:
        pairs.insert(1, ("description", s.description))
    rows, run_data = _runs(history, zone, now)
    text = fmt.fields(pairs)
    text += "\n\nnext fire times" + (" (if resumed now)" if s.paused else "") + ":\n"
    text += "\n".join(f"  {fmt.when(to_ms(t), zone, now)}" for t in upcoming) or "  none"
    text += "\n\nlast runs:\n"
    if rows:
        table = fmt.table(("SCHEDULED", "LATE", "ORIGIN", "OUTCOME", "EXECUTION"), rows)
        text += "\n".join("  " + line for line in table.splitlines())
    else:
        text += "  none yet"
    out(
        args,
        {"schedule": s.public_dict(), "next": [t.isoformat() for t in upcoming], "runs": run_data},
        text,
    )


async def cmd_next(client: Client, args: argparse.Namespace) -> None:
    s = await client.get(args.id)
    times = await client.next_runs(args.id, args.n)
    now = to_ms(await client.server_time())
    out(
        args,
        [t.isoformat() for t in times],
        "\n".join(fmt.when(to_ms(t), s.timezone, now) for t in times) or "no more fire times",
    )


async def cmd_history(client: Client, args: argparse.Namespace) -> None:
    s = await client.get(args.id)
    events = await client.history(args.id, limit=args.limit, status=args.status)
    now = to_ms(await client.server_time())
    rows = []
    for e in events:
        at = e.get("at")
        sched = e.get("scheduled_at")
        extra = {
            k: v
            for k, v in e.items()
            if k not in ("event", "at", "scheduled_at", "execution_id", "late_ms")
        }
        rows.append(
            (
                fmt.when(int(at), s.timezone, now) if at is not None else "-",
                e.get("event", "?"),
                fmt.clock(int(sched), s.timezone) if sched is not None else "-",
                fmt.duration(e["late_ms"]) if e.get("late_ms") is not None else "-",
                e.get("execution_id", "-"),
                " ".join(f"{k}={v}" for k, v in extra.items()),
            )
        )
    headers = ("AT", "EVENT", "SCHEDULED", "LATE", "EXECUTION", "DETAIL")
    out(args, events, fmt.table(headers, rows) if rows else "no events")


async def cmd_backfill(client: Client, args: argparse.Namespace) -> None:
    result = await client.backfill(args.id, args.start, args.end)
    counts = {k: result.count(k) for k in ("fired", "skipped", "buffered", "already_fired")}
    lines = [
        f"{len(result.outcomes)} occurrence(s): " + ", ".join(f"{n} {k}" for k, n in counts.items())
    ]
    lines += [f"  {eid}  {status}" for eid, status in result.outcomes.items()]
    out(args, {"counts": counts, "outcomes": result.outcomes}, "\n".join(lines))


async def cmd_sync(client: Client, args: argparse.Namespace) -> None:
    # A file sync is a deployment's own write path (rsched-scheduler --schedules runs it too),
    # not a client call: it gets a connection of its own.
    redis = connect(client.settings.url)
    try:
        plan = await sync_file(
            redis, client.settings, args.file, dry_run=args.dry_run, adopt=args.adopt
        )
    finally:
        await redis.aclose()
    out(args, plan.as_dict(), "\n".join(plan.lines()))
