"""The ``rsched`` command: manage schedules, dead letters and schedules files from a shell.

Exit codes: 0 ok, 1 error (the message says what and how to fix it), 2 usage. Human tables by
default, ``--json`` for scripts. ``rsched scheduler`` and ``rsched worker`` run the two
processes (the same as ``rsched-scheduler`` and ``rsched-worker``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import orjson
from pydantic import ValidationError

from rsched import _format as fmt
from rsched._client import Client
from rsched._declare import sync_file
from rsched._errors import RschedError
from rsched._job import DeadLetter
from rsched._log import configure_logging
from rsched._model import Schedule, to_ms
from rsched._settings import Settings

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
_DELEGATES = {"scheduler": "rsched._scheduler_main", "worker": "rsched._worker_main"}

Handler = Callable[[Client, argparse.Namespace], Awaitable[Any]]


class UsageError(Exception):
    """Bad command-line input discovered after parsing (exit code 2)."""


# --- argument types ---------------------------------------------------------------------------


def duration_s(text: str) -> float:
    """``300``, ``90s``, ``5m``, ``1h30m``, ``1.5d``, ``250ms`` -> seconds."""
    try:
        return fmt.parse_duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def json_object(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc}); e.g. '{{\"k\": 1}}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"k\": 1}'")
    return value


def iso_datetime(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time; e.g. 2026-05-01T09:30 or 2026-05-01T09:30:00+02:00"
        ) from None


# --- parser -----------------------------------------------------------------------------------


def _common() -> argparse.ArgumentParser:
    # SUPPRESS defaults let the options stand before or after the subcommand.
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--redis-url",
        default=argparse.SUPPRESS,
        help="Redis URL (env RSCHED_REDIS_URL; default redis://127.0.0.1:6379/0)",
    )
    p.add_argument(
        "--prefix", default=argparse.SUPPRESS, help="key prefix (env RSCHED_PREFIX; default rsched)"
    )
    p.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )
    return p


def _sub(
    subs: Any, name: str, help_: str, examples: str, handler: Handler | None
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subs.add_parser(
        name,
        help=help_,
        description=help_,
        epilog="examples:\n" + examples.strip("\n"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common()],
    )
    p.set_defaults(handler=handler)
    return p


def _spec_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", nargs="?", help="schedule id (letters, digits, '. _ - :')")
    p.add_argument("--file", help="read the whole schedule from a JSON file ('-' for stdin)")
    p.add_argument("--task", help="the handler name a worker runs")
    trigger = p.add_mutually_exclusive_group()
    trigger.add_argument("--cron", help="cron expression, e.g. '0 2 * * *' or '*/10 * * * * *'")
    trigger.add_argument("--every", type=duration_s, help="interval: 300, 90s, 5m, 1h30m")
    trigger.add_argument("--at", type=iso_datetime, help="one-off time, ISO 8601")
    p.add_argument("--tz", "--timezone", dest="timezone", help="IANA zone, e.g. Europe/Rome")
    p.add_argument("--queue", help="queue name (default: default)")
    p.add_argument("--payload", type=json_object, help="JSON object handed to the handler")
    p.add_argument("--start-at", type=iso_datetime, help="first possible run (ISO 8601)")
    p.add_argument("--end-at", type=iso_datetime, help="last possible run (ISO 8601)")
    p.add_argument("--max-runs", type=int, help="complete after this many runs")
    p.add_argument("--max-retries", type=int, help="retries after a failure (default 3)")
    p.add_argument("--retry-base", dest="retry_base_s", type=duration_s, help="first delay (30s)")
    p.add_argument("--retry-multiplier", type=float, help="delay factor per retry (2; 1 = fixed)")
    p.add_argument("--retry-max", dest="retry_max_s", type=duration_s, help="delay cap (1h)")
    p.add_argument("--retry-jitter", type=float, help="random share of each delay, 0-1 (0.2)")
    p.add_argument("--timeout", dest="timeout_s", type=duration_s, help="job timeout")
    p.add_argument("--overlap", choices=["allow", "skip", "buffer_one", "cancel_previous"])
    p.add_argument("--misfire", choices=["run_once", "skip", "catch_up"])
    p.add_argument("--catch-up-limit", type=int)
    p.add_argument("--misfire-grace", dest="misfire_grace_s", type=duration_s)
    p.add_argument("--description")
    p.add_argument("--paused", action="store_true", default=None, help="create it paused")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rsched",
        description="Manage rsched schedules, jobs and dead letters in Redis.",
        epilog=(
            "examples:\n"
            "  rsched add nightly --task reports.nightly --cron '0 2 * * *' --tz Europe/Rome\n"
            "  rsched ls\n"
            "  rsched show nightly\n"
            "  rsched --json stats\n"
            "  rsched sync schedules.toml --dry-run\n"
            "  rsched scheduler --help\n\n"
            "exit codes: 0 ok, 1 error, 2 usage"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common()],
    )
    subs = parser.add_subparsers(dest="command", metavar="COMMAND")

    for name, verb in (("add", "Create a schedule"), ("upsert", "Create or replace a schedule")):
        p = _sub(
            subs,
            name,
            f"{verb} (fails if the id exists)" if name == "add" else verb,
            f"  rsched {name} nightly --task reports.nightly --cron '0 2 * * *' --tz Europe/Rome\n"
            f"  rsched {name} poll --task feeds.poll --every 5m --payload '{{\"feed\": 1}}'\n"
            f"  rsched {name} launch --task rocket.go --at 2030-01-01T09:00 --tz UTC\n"
            f"  rsched {name} --file nightly.json",
            _cmd_add if name == "add" else _cmd_upsert,
        )
        _spec_options(p)

    p = _sub(subs, "rm", "Remove schedules", "  rsched rm nightly\n  rsched rm a b c", _cmd_rm)
    p.add_argument("ids", nargs="+", metavar="ID")

    p = _sub(
        subs,
        "pause",
        "Pause a schedule until resumed",
        "  rsched pause nightly --note 'db migration'",
        _cmd_pause,
    )
    p.add_argument("id")
    p.add_argument("--note", help="why (shown by ls and show)")

    p = _sub(subs, "resume", "Resume a paused schedule", "  rsched resume nightly", _cmd_resume)
    p.add_argument("id")

    p = _sub(
        subs,
        "trigger",
        "Run one extra occurrence now (overlap policy applies)",
        "  rsched trigger nightly",
        _cmd_trigger,
    )
    p.add_argument("id")

    p = _sub(
        subs,
        "ls",
        "List schedules in next-run order",
        "  rsched ls\n  rsched ls --queue reports --paused\n  rsched ls --all --json",
        _cmd_ls,
    )
    p.add_argument("--queue")
    p.add_argument("--task")
    state = p.add_mutually_exclusive_group()
    state.add_argument("--paused", action="store_true", default=None, help="only paused ones")
    state.add_argument(
        "--active", dest="paused", action="store_false", default=None, help="only unpaused ones"
    )
    p.add_argument("--limit", type=int, default=50, help="page size (default 50)")
    p.add_argument("--cursor", help="continue from a previous page")
    p.add_argument("--all", action="store_true", help="every page")

    p = _sub(
        subs,
        "show",
        "Spec, state, next five fire times and last runs of a schedule",
        "  rsched show nightly\n  rsched show nightly --json",
        _cmd_show,
    )
    p.add_argument("id")

    p = _sub(
        subs,
        "next",
        "Next fire times",
        "  rsched next nightly\n  rsched next nightly -n 20",
        _cmd_next,
    )
    p.add_argument("id")
    p.add_argument("-n", type=int, default=5, help="how many (default 5)")

    p = _sub(
        subs,
        "history",
        "Recent events of a schedule, newest first",
        "  rsched history nightly\n  rsched history nightly --status dead --limit 50",
        _cmd_history,
    )
    p.add_argument("id")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--status", help="only this event: fired, skipped, completed, failed, dead, …")

    p = _sub(
        subs,
        "backfill",
        "Fire the occurrences of a past range (each at most once)",
        "  rsched backfill nightly --start 2026-05-01 --end 2026-05-07T23:59\n"
        "  (naive times are in the schedule's zone; overlap policy applies)",
        _cmd_backfill,
    )
    p.add_argument("id")
    p.add_argument("--start", type=iso_datetime, required=True)
    p.add_argument("--end", type=iso_datetime, required=True)

    dead = _sub(
        subs,
        "dead",
        "Dead letters: ls, show, requeue, purge",
        "  rsched dead ls --queue default\n  rsched dead show 1715000000000-0\n"
        "  rsched dead requeue --all\n  rsched dead purge --task emails.send",
        None,
    )
    dsubs = dead.add_subparsers(dest="dead_command", metavar="ACTION")
    p = _sub(
        dsubs,
        "ls",
        "List dead letters, newest first",
        "  rsched dead ls\n  rsched dead ls --queue mail --task emails.send",
        _cmd_dead_ls,
    )
    p.add_argument("--queue", default="default")
    p.add_argument("--task")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--cursor")
    p = _sub(
        dsubs,
        "show",
        "One dead letter in full",
        "  rsched dead show 1715000000000-0",
        _cmd_dead_show,
    )
    p.add_argument("entry_id")
    p.add_argument("--queue", default="default")
    for name, handler in (("requeue", _cmd_dead_requeue), ("purge", _cmd_dead_purge)):
        what = (
            "Put dead letters back on their queue" if name == "requeue" else "Delete dead letters"
        )
        p = _sub(
            dsubs,
            name,
            what,
            f"  rsched dead {name} 1715000000000-0\n  rsched dead {name} --task emails.send\n"
            f"  rsched dead {name} --all --queue mail",
            handler,
        )
        p.add_argument("entry_ids", nargs="*", metavar="ENTRY_ID")
        p.add_argument("--queue", default="default")
        p.add_argument("--task", help="only dead letters of this task")
        p.add_argument("--all", action="store_true", help="every dead letter of the queue")

    _sub(
        subs,
        "stats",
        "Counts, backlog, queues, leader",
        "  rsched stats\n  rsched stats --json",
        _cmd_stats,
    )

    p = _sub(
        subs,
        "sync",
        "Make Redis match a TOML schedules file",
        "  rsched sync schedules.toml --dry-run\n  rsched sync schedules.toml\n"
        "  rsched sync schedules.toml --adopt   (take over same-id schedules made by the SDK)",
        _cmd_sync,
    )
    p.add_argument("file")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--adopt", action="store_true", help="take over existing ids")

    for name in _DELEGATES:
        subs.add_parser(name, help=f"run the {name} process (see rsched {name} --help)")
    return parser


# --- output helpers ---------------------------------------------------------------------------


def _out(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        sys.stdout.write(orjson.dumps(data, default=str, option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        print(text)


def _trigger(s: Schedule) -> str:
    if s.cron is not None:
        return f"cron {s.cron}"
    if s.every is not None:
        return f"every {fmt.duration(s.every * 1000)}"
    return f"at {fmt.clock(to_ms(s.at), s.timezone)}" if s.at else "-"


def _status(s: Schedule) -> str:
    return "completed" if s.completed else "paused" if s.paused else "active"


def _ms(dt: datetime | None) -> int | None:
    return to_ms(dt) if dt is not None else None


# --- commands ---------------------------------------------------------------------------------


def _spec_from_args(args: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if args.file:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        try:
            data = json_object(text)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--file {args.file}: {exc}") from None
    names = [
        "task",
        "cron",
        "every",
        "at",
        "timezone",
        "queue",
        "payload",
        "start_at",
        "end_at",
        "max_runs",
        "max_retries",
        "retry_base_s",
        "retry_multiplier",
        "retry_max_s",
        "retry_jitter",
        "timeout_s",
        "overlap",
        "misfire",
        "catch_up_limit",
        "misfire_grace_s",
        "description",
        "paused",
    ]
    if args.id:
        data["id"] = args.id
    if any(getattr(args, t) is not None for t in ("cron", "every", "at")):
        for t in ("cron", "every", "at"):
            data.pop(t, None)
    data.update({n: getattr(args, n) for n in names if getattr(args, n) is not None})
    if "id" not in data:
        raise UsageError("give the schedule id (rsched add ID …) or an 'id' in --file")
    return data


async def _write(client: Client, args: argparse.Namespace, upsert: bool) -> None:
    s = await (client.upsert if upsert else client.add)(_spec_from_args(args))
    now = await client.store.time_ms()
    verb = "upserted" if upsert else "added"
    _out(
        args,
        s.public_dict(),
        f"{verb} {s.id} (generation {s.generation}); next run "
        f"{fmt.when(_ms(s.next_run), s.timezone, now)}",
    )


async def _cmd_add(client: Client, args: argparse.Namespace) -> None:
    await _write(client, args, upsert=False)


async def _cmd_upsert(client: Client, args: argparse.Namespace) -> None:
    await _write(client, args, upsert=True)


async def _cmd_rm(client: Client, args: argparse.Namespace) -> None:
    for sid in args.ids:
        await client.remove(sid)
    _out(args, {"removed": args.ids}, "\n".join(f"removed {sid}" for sid in args.ids))


async def _cmd_pause(client: Client, args: argparse.Namespace) -> None:
    await client.pause(args.id, args.note)
    _out(args, {"paused": args.id}, f"paused {args.id}")


async def _cmd_resume(client: Client, args: argparse.Namespace) -> None:
    await client.resume(args.id)
    s = await client.get(args.id)
    now = await client.store.time_ms()
    _out(
        args,
        s.public_dict(),
        f"resumed {args.id}; next run {fmt.when(_ms(s.next_run), s.timezone, now)}",
    )


async def _cmd_trigger(client: Client, args: argparse.Namespace) -> None:
    fired = await client.trigger(args.id)
    _out(
        args,
        {"execution_id": fired.execution_id, "status": fired.status},
        f"{fired.status} {fired.execution_id}"
        + ("" if fired.status == "fired" else " (the previous run is unfinished: overlap policy)"),
    )


async def _cmd_ls(client: Client, args: argparse.Namespace) -> None:
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
    now = await client.store.time_ms()
    rows = [
        (
            s.id,
            s.task,
            s.queue,
            _trigger(s),
            _status(s),
            fmt.when(_ms(s.next_run), s.timezone, now) if not s.paused else "-",
            fmt.relative(_ms(s.last_run), now),
            s.runs,
        )
        for s in schedules
    ]
    text = fmt.table(
        ("ID", "TASK", "QUEUE", "TRIGGER", "STATUS", "NEXT RUN", "LAST RUN", "RUNS"), rows
    )
    if not schedules:
        text = "no schedules"
    if cursor:
        text += f"\nmore: rsched ls --cursor '{cursor}' (or --all)"
    _out(args, {"schedules": [s.public_dict() for s in schedules], "cursor": cursor}, text)


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


async def _cmd_show(client: Client, args: argparse.Namespace) -> None:
    s = await client.get(args.id)
    upcoming = await client.next_runs(args.id, 5)
    history = await client.history(args.id, limit=client.settings.history_limit)
    now = await client.store.time_ms()
    zone = s.timezone
    runs = f"{s.runs}" + (f" of {s.max_runs}" if s.max_runs else "")
    pairs: list[tuple[str, object]] = [
        ("id", s.id),
        ("task", s.task),
        ("queue", s.queue),
        ("trigger", _trigger(s)),
        ("timezone", zone),
        ("payload", orjson.dumps(s.payload).decode()),
        ("status", _status(s) + (f" ({s.pause_note})" if s.pause_note else "")),
        ("next run", fmt.when(_ms(s.next_run), zone, now) if not s.paused else "-"),
        ("last run", fmt.when(_ms(s.last_run), zone, now)),
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
        ("created", fmt.when(_ms(s.created_at), zone, now)),
        ("updated", fmt.when(_ms(s.updated_at), zone, now)),
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
    _out(
        args,
        {"schedule": s.public_dict(), "next": [t.isoformat() for t in upcoming], "runs": run_data},
        text,
    )


async def _cmd_next(client: Client, args: argparse.Namespace) -> None:
    s = await client.get(args.id)
    times = await client.next_runs(args.id, args.n)
    now = await client.store.time_ms()
    _out(
        args,
        [t.isoformat() for t in times],
        "\n".join(fmt.when(to_ms(t), s.timezone, now) for t in times) or "no more fire times",
    )


async def _cmd_history(client: Client, args: argparse.Namespace) -> None:
    s = await client.get(args.id)
    events = await client.history(args.id, limit=args.limit, status=args.status)
    now = await client.store.time_ms()
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
    text = (
        fmt.table(("AT", "EVENT", "SCHEDULED", "LATE", "EXECUTION", "DETAIL"), rows)
        if rows
        else "no events"
    )
    _out(args, events, text)


async def _cmd_backfill(client: Client, args: argparse.Namespace) -> None:
    result = await client.backfill(args.id, args.start, args.end)
    counts = {k: result.count(k) for k in ("fired", "skipped", "buffered", "already_fired")}
    lines = [
        f"{len(result.outcomes)} occurrence(s): " + ", ".join(f"{n} {k}" for k, n in counts.items())
    ]
    lines += [f"  {eid}  {status}" for eid, status in result.outcomes.items()]
    _out(args, {"counts": counts, "outcomes": result.outcomes}, "\n".join(lines))


def _letter(d: DeadLetter) -> dict[str, Any]:
    return {
        "entry_id": d.entry_id,
        "queue": d.queue,
        "execution_id": d.execution_id,
        "task": d.task,
        "schedule_id": d.schedule_id,
        "payload": d.payload,
        "attempt": d.attempt,
        "reason": d.reason,
        "error_type": d.error_type,
        "error_message": d.error_message,
        "traceback": d.traceback,
        "deliveries": d.deliveries,
        "dead_at": d.dead_at.isoformat(),
        "worker": d.worker,
    }


async def _cmd_dead_ls(client: Client, args: argparse.Namespace) -> None:
    letters, cursor = await client.dead_letters(
        args.queue, limit=args.limit, cursor=args.cursor, task=args.task
    )
    now = await client.store.time_ms()
    rows = [
        (
            d.entry_id,
            d.task,
            d.reason,
            f"{d.error_type}: {d.error_message}"[:80],
            d.attempt,
            fmt.relative(to_ms(d.dead_at), now),
        )
        for d in letters
    ]
    text = (
        fmt.table(("ENTRY", "TASK", "REASON", "ERROR", "ATTEMPT", "DIED"), rows)
        if rows
        else f"no dead letters in queue {args.queue}"
    )
    if cursor:
        text += f"\nmore: rsched dead ls --queue {args.queue} --cursor {cursor}"
    _out(args, {"dead_letters": [_letter(d) for d in letters], "cursor": cursor}, text)


async def _cmd_dead_show(client: Client, args: argparse.Namespace) -> None:
    d = await client.dead_letter(args.queue, args.entry_id)
    data = _letter(d)
    pairs = [(k, v) for k, v in data.items() if k != "traceback"]
    text = fmt.fields(pairs) + "\n\ntraceback:\n" + (d.traceback or "-")
    _out(args, data, text)


def _selection(args: argparse.Namespace) -> list[str] | None:
    if args.entry_ids and args.all:
        raise UsageError("give entry ids or --all, not both")
    if not args.entry_ids and not args.all and not args.task:
        raise UsageError("give entry ids, --task TASK or --all")
    return list(args.entry_ids) or None


async def _cmd_dead_requeue(client: Client, args: argparse.Namespace) -> None:
    n = await client.requeue(args.queue, _selection(args), task=args.task)
    _out(args, {"requeued": n}, f"requeued {n} dead letter(s) onto queue {args.queue}")


async def _cmd_dead_purge(client: Client, args: argparse.Namespace) -> None:
    n = await client.purge(args.queue, _selection(args), task=args.task)
    _out(args, {"purged": n}, f"purged {n} dead letter(s) from queue {args.queue}")


async def _cmd_stats(client: Client, args: argparse.Namespace) -> None:
    st = await client.stats()
    sc = st.schedules
    lines = [
        f"schedules: {sc['total']} total, {sc['active']} active, {sc['paused']} paused, "
        f"{sc['completed']} completed",
        f"due now:   {st.due}",
    ]
    if st.oldest_overdue:
        o = st.oldest_overdue
        lines.append(f"oldest overdue: {o['id']} (late {fmt.duration(o['late_ms'])})")
    if st.leader:
        ld = st.leader
        lines.append(
            f"leader:    {ld['owner']} (token {ld['token']}, renewed "
            f"{fmt.duration(ld['lease_age_ms'])} ago, "
            f"expires in {fmt.duration(ld['lease_left_ms'])})"
        )
    else:
        lines.append("leader:    none (no scheduler is running)")
    lines.append(f"dead letters: {st.dead_letters}")
    if st.queues:
        rows = [
            (
                name,
                q.get("length"),
                q.get("pending"),
                q.get("delayed"),
                q.get("dead"),
                q.get("consumers"),
                fmt.duration(q["oldest_pending_ms"]) if q.get("oldest_pending_ms") else "-",
            )
            for name, q in st.queues.items()
        ]
        lines += [
            "",
            fmt.table(
                ("QUEUE", "LENGTH", "PENDING", "DELAYED", "DEAD", "CONSUMERS", "OLDEST PENDING"),
                rows,
            ),
        ]
    _out(args, st.as_dict(), "\n".join(lines))


async def _cmd_sync(client: Client, args: argparse.Namespace) -> None:
    plan = await sync_file(
        client.redis, client.settings, args.file, dry_run=args.dry_run, adopt=args.adopt
    )
    _out(args, plan.as_dict(), "\n".join(plan.lines()))


# --- entry point ------------------------------------------------------------------------------


def _settings(args: argparse.Namespace) -> Settings:
    given = {"redis_url": getattr(args, "redis_url", None), "prefix": getattr(args, "prefix", None)}
    try:
        return Settings(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{field}: {first['msg']}") from None


async def _run(handler: Handler, args: argparse.Namespace, settings: Settings) -> None:
    async with Client.from_settings(settings) as client:
        await handler(client, args)


def _delegate(argv: Sequence[str]) -> int | None:
    """``rsched scheduler …`` / ``rsched worker …``: hand over to that process's main."""
    rest = list(argv)
    globals_: dict[str, str] = {}
    while rest:
        name, eq, value = rest[0].partition("=")
        if name not in ("--redis-url", "--prefix"):
            break
        if eq:
            globals_[name], rest = value, rest[1:]
        elif len(rest) > 1:
            globals_[name], rest = rest[1], rest[2:]
        else:
            break
    if not rest or rest[0] not in _DELEGATES:
        return None
    if "--redis-url" in globals_:
        os.environ["RSCHED_REDIS_URL"] = globals_["--redis-url"]
    if "--prefix" in globals_:
        os.environ["RSCHED_PREFIX"] = globals_["--prefix"]
    module = importlib.import_module(_DELEGATES[rest[0]])
    try:
        result = module.main(rest[1:])
    except SystemExit as exc:  # argparse's --help / usage error inside that main
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return int(result or 0)


def _fail(args: argparse.Namespace | None, exc: BaseException, code: int) -> int:
    message = str(exc)
    if args is not None and getattr(args, "json", False):
        doc = {"error": type(exc).__name__, "message": message}
        sys.stderr.write(orjson.dumps(doc).decode() + "\n")
    else:
        print(f"rsched: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run one ``rsched`` command; returns the exit code (0 ok, 1 error, 2 usage)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    delegated = _delegate(argv)
    if delegated is not None:
        return delegated
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2): argparse printed it
        return int(exc.code or 0)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        # `rsched` or `rsched dead` alone: show what is available.
        target = parser if args.command is None else _subparser(parser, args.command)
        target.print_help(sys.stderr)
        return EXIT_USAGE
    configure_logging("warning")
    try:
        settings = _settings(args)
        anyio.run(_run, handler, args, settings)
    except UsageError as exc:
        return _fail(args, exc, EXIT_USAGE)
    except RschedError as exc:
        return _fail(args, exc, EXIT_ERROR)
    except BrokenPipeError:  # `rsched ls | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:  # e.g. --file that cannot be read
        return _fail(args, exc, EXIT_ERROR)
    except KeyboardInterrupt:
        return 130
    return EXIT_OK


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    return parser


if __name__ == "__main__":
    sys.exit(main())
