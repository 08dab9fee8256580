"""``rsched`` commands on schedules: add, upsert, update, rm, pause, resume, trigger, ls, show,
next, history, backfill, sync, and cron (a preview that needs no Redis)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from rsched._cli import bulk
from rsched._cli.audit import cmd_specs
from rsched._cli.calendars import calendar_file
from rsched._cli.common import (
    each,
    json_object,
    out,
    report,
    when,
)
from rsched._cli.workers import warn_if_no_worker_has
from rsched._client.client import Client, Occurrence
from rsched._client.schedules_file import sync_file
from rsched._core import humanize as fmt
from rsched._core.bulk import BulkResult
from rsched._core.errors import InvalidArgument, InvalidSchedule, ScheduleNotFound, UsageError
from rsched._core.history import HistoryEvent
from rsched._core.http_target import DEFAULT_TIMEOUT_S, display, masked, request_body
from rsched._core.rules import PAGE_MAX, check_page
from rsched._core.schedule import STATE_FIELDS, Schedule, to_ms
from rsched._core.timezones import canonical_timezone, resolve_timezone
from rsched._core.timing import next_fire_times
from rsched._redis.connection import connect

#: The spec options of ``add`` / ``upsert`` / ``update`` (argparse dests), copied into the spec
#: when given.
SPEC_OPTIONS = (
    "task", "cron", "every", "at", "timezone", "dst_gap", "dst_fold", "queue", "priority",
    "payload", "start_at", "end_at",
    "max_runs", "max_retries", "retry_base_s", "retry_multiplier", "retry_max_s",
    "retry_jitter", "timeout_s", "overlap", "buffer_limit", "misfire", "catch_up_limit",
    "misfire_grace_s", "debounce", "description", "paused", "limits", "start_deadline",
    "pause_after_failures", "exclude", "jitter", "labels",
)  # fmt: skip
_TRIGGERS = ("cron", "every", "at")
#: The spec fields a command compares before and after a write (what it reports as changed).
SPEC_FIELDS = tuple(
    name
    for name in Schedule.model_fields
    if name not in STATE_FIELDS and name not in ("id", "source", "pause_note")
)
#: Fields ``rsched update --clear`` sets back to their default (None for the optional ones).
CLEARABLE = tuple(f for f in SPEC_FIELDS if f not in ("task", "paused", *_TRIGGERS))
#: Fields whose flag is not the field name with dashes, by flag.
_FIELD_OF = {
    "tz": "timezone",
    "retry-base": "retry_base_s",
    "retry-max": "retry_max_s",
    "timeout": "timeout_s",
    "misfire-grace": "misfire_grace_s",
    "limit": "limits",
}


def clearable(text: str) -> str:
    """``--clear`` argument: a field name or its flag (``end_at``, ``end-at``, ``--retry-base``)."""
    name = text.strip().removeprefix("--")
    name = _FIELD_OF.get(name, name).replace("-", "_")
    if name not in CLEARABLE:
        raise argparse.ArgumentTypeError(
            f"{text!r} cannot be cleared; give one of: {', '.join(CLEARABLE)}"
        )
    return name


def _read_file(args: argparse.Namespace) -> dict[str, Any]:
    if not args.file:
        return {}
    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    try:
        return json_object(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"--file {args.file}: {exc}") from None


def _given(args: argparse.Namespace) -> dict[str, Any]:
    return {n: getattr(args, n) for n in SPEC_OPTIONS if getattr(args, n, None) is not None}


def _spec_from_args(args: argparse.Namespace) -> dict[str, Any]:
    data = _read_file(args)
    if args.id:
        data["id"] = args.id
    given = _given(args)
    if any(t in given for t in _TRIGGERS):  # a trigger option replaces the file's trigger
        for t in _TRIGGERS:
            data.pop(t, None)
    data.update(given)
    if "id" not in data:
        raise UsageError(f"give the schedule id (rsched {args.command} ID …) or an 'id' in --file")
    return data


def _shown(value: Any, name: str = "") -> str:
    if value is None:
        return "-"
    if name in ("every", "start_deadline", "jitter") or name.endswith("_s"):
        return fmt.duration(float(value) * 1000)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    if name == "limits":
        return " ".join(fmt.limit_text(lim) for lim in value) or "-"
    if name == "exclude":
        return ", ".join(value) or "-"
    return str(value)


def _changed(old: Schedule, new: Schedule) -> list[str]:
    """The spec fields whose value differs between two versions of a schedule."""
    return [f for f in SPEC_FIELDS if getattr(old, f) != getattr(new, f)]


def _next_run(s: Schedule, now: int) -> str:
    if s.completed:
        return "none (completed)"
    return "none (paused)" if s.paused else when(s.next_run, s.timezone, now)


async def cmd_add(client: Client, args: argparse.Namespace) -> None:
    s = await client.add(_spec_from_args(args))
    now = to_ms(await client.server_time())
    text = f"added {s.id} (generation {s.generation}); next run {_next_run(s, now)}"
    out(args, s.public_dict(), text)
    await warn_if_no_worker_has(client, s.task, s.queue)


async def cmd_upsert(client: Client, args: argparse.Namespace) -> None:
    """Replace the whole spec; report the fields the new spec left out that went back to their
    defaults (compared with the stored spec), so nothing is kept or lost silently."""
    spec = _spec_from_args(args)
    try:
        old: Schedule | None = await client.get(spec["id"])
    except ScheduleNotFound:  # also for an invalid id: upsert then says what is wrong with it
        old = None
    s = await client.upsert(spec)
    now = to_ms(await client.server_time())
    given = {*spec, *_TRIGGERS}  # the trigger given replaces the old one: no news
    reset = [] if old is None else [f for f in _changed(old, s) if f not in given]
    verb = "added" if old is None else "replaced"
    lines = [f"{verb} {s.id} (generation {s.generation}); next run {_next_run(s, now)}"]
    if reset:
        lines.append(
            "reset: "
            + ", ".join(
                f"{f} ({_shown(getattr(old, f), f)} -> {_shown(getattr(s, f), f)})" for f in reset
            )
            + f"\n  (upsert replaces the whole spec; rsched update {s.id} changes only the "
            "fields given)"
        )
    out(
        args,
        {"schedule": s.public_dict(), "created": old is None, "reset": reset},
        "\n".join(lines),
    )


async def cmd_update(client: Client, args: argparse.Namespace) -> None:
    """Change the fields given, keep every other one (``Client.update``)."""
    changes = _read_file(args)
    if changes.pop("id", args.id) != args.id:
        raise UsageError(f"--file {args.file} names another schedule than {args.id!r}")
    changes.update(_given(args))
    for name in dict.fromkeys(args.clear or ()):  # --no-x and --clear x may say it twice
        if name in changes:
            raise UsageError(f"--clear {name} and a new {name} given together; give one of them")
        changes[name] = Schedule.model_fields[name].get_default(call_default_factory=True)
    if not changes:
        raise UsageError(
            "nothing to change: give the fields to change (e.g. --every 2h) or --clear FIELD"
        )
    old = await client.get(args.id)
    s = await client.update(args.id, **changes)
    now = to_ms(await client.server_time())
    changed = _changed(old, s)
    written = s.generation != old.generation
    if written:
        what = (
            "; ".join(
                f"{f} {_shown(getattr(old, f), f)} -> {_shown(getattr(s, f), f)}" for f in changed
            )
            or "its source"
        )  # the one field written that is not listed
        text = f"updated {s.id} (generation {s.generation}): {what}; next run {_next_run(s, now)}"
    else:
        text = f"{s.id} unchanged (generation {s.generation}): the fields given already hold"
    out(args, {"schedule": s.public_dict(), "changed": changed, "written": written}, text)


async def _by_filter(
    client: Client,
    args: argparse.Namespace,
    act: Callable[[list[str]], Awaitable[BulkResult]],
    verb: str,
) -> bool:
    """Run a bulk command on what its filter selects (or, with ``--dry-run``, print the ids
    given); False when it has ids to act on one by one as before."""
    bulk.check_targets(args, args.ids, "schedule")
    if not (bulk.has_filter(args) or args.dry_run):
        return False

    async def select() -> list[str]:
        if args.ids:
            return list(dict.fromkeys(args.ids))
        return await client.select(labels=args.labels, task=args.task, queue=args.queue)

    await bulk.by_filter(client, args, select, act, verb, "schedule")
    return True


async def cmd_rm(client: Client, args: argparse.Namespace) -> None:
    if await _by_filter(client, args, client.remove_many, "remove"):
        return

    async def rm(sid: str) -> tuple[str, Any]:
        await client.remove(sid)
        return f"removed {sid}", sid

    report(args, "removed", await each(args.ids, rm), "schedule(s) not removed")


async def cmd_pause(client: Client, args: argparse.Namespace) -> None:
    if await _by_filter(client, args, lambda ids: client.pause_many(ids, args.note), "pause"):
        return

    async def pause(sid: str) -> tuple[str, Any]:
        await client.pause(sid, args.note)
        return f"paused {sid}", sid

    report(args, "paused", await each(args.ids, pause), "schedule(s) not paused")


async def cmd_resume(client: Client, args: argparse.Namespace) -> None:
    if await _by_filter(client, args, client.resume_many, "resume"):
        return
    now = to_ms(await client.server_time())

    async def resume(sid: str) -> tuple[str, Any]:
        await client.resume(sid)
        s = await client.get(sid)
        return f"resumed {sid}; next run {_next_run(s, now)}", s.public_dict()

    report(args, "resumed", await each(args.ids, resume), "schedule(s) not resumed")


async def cmd_trigger(client: Client, args: argparse.Namespace) -> None:
    if await _by_filter(client, args, client.trigger_many, "trigger"):
        return

    async def trigger(sid: str) -> tuple[str, Any]:
        fired = await client.trigger(sid)
        note = {
            "fired": "",
            "debounced": " (merged into the open debounce window: its job runs later)",
        }.get(fired.status, " (the previous run is unfinished: overlap policy)")
        data = {"id": sid, "execution_id": fired.execution_id, "status": fired.status}
        return f"{fired.status} {fired.execution_id}{note}", data

    report(args, "triggered", await each(args.ids, trigger), "schedule(s) not triggered")


async def cmd_ls(client: Client, args: argparse.Namespace) -> None:
    schedules: list[Schedule] = []
    cursor = args.cursor
    while True:
        page = await client.list(
            queue=args.queue,
            task=args.task,
            paused=args.paused,
            id_prefix=args.id_prefix,
            labels=args.labels,
            limit=args.limit,
            cursor=cursor,
        )
        schedules += page.items
        cursor = page.cursor
        if not (args.all and cursor):
            break
    now = to_ms(await client.server_time())
    rows = [
        (
            s.id,
            fmt.task_text(s),
            s.queue,
            fmt.trigger_text(s),
            fmt.status_text(s),
            when(s.next_run, s.timezone, now) if not s.paused else "-",
            fmt.relative(to_ms(s.last_run) if s.last_run is not None else None, now),
            s.runs,
        )
        for s in schedules
    ]
    headers = ("ID", "TASK", "QUEUE", "TRIGGER", "STATUS", "NEXT RUN", "LAST RUN", "RUNS")
    text = fmt.table(headers, rows) if schedules else "no schedules"
    if cursor:
        same = [f"--{n.replace('_', '-')} {v}" for n in ("queue", "task", "id_prefix")
                if (v := getattr(args, n)) is not None]  # fmt: skip
        same += [f"--label {pair}" for pair in args.labels or ()]
        same += [] if args.paused is None else ["--paused" if args.paused else "--active"]
        text += f"\nmore: rsched ls {' '.join([*same, ''])}--cursor '{cursor}' (or --all)"
    out(args, {"schedules": [s.public_dict() for s in schedules], "cursor": cursor}, text)


def _runs(history: list[HistoryEvent], zone: str, now: int) -> tuple[list[Any], list[Any]]:
    """Rows (scheduled, lateness, origin, outcome, execution id) of the last runs."""
    outcome: dict[str, str] = {}
    for event in history:  # newest first: the first outcome seen is the latest
        exec_id = event.execution_id
        name = event.event
        if exec_id and name not in ("fired", "buffered", "skipped") and exec_id not in outcome:
            outcome[exec_id] = name
    rows, data = [], []
    for event in history:
        name = event.event
        if name not in ("fired", "skipped", "misfired", "buffered"):
            continue
        exec_id = event.execution_id or ""
        result = outcome.get(exec_id, "queued") if name == "fired" else name
        if name == "buffered":  # then released into its queue when the run before it ended
            result = outcome.get(exec_id, "buffered").replace("released", "queued")
        if name == "skipped" and event.reason:
            policy = event.extra.get("policy")
            result = f"skipped ({event.reason}" + (f", overlap={policy})" if policy else ")")
            if event.reason == "debounced" and event.extra.get("into"):
                result = f"skipped (debounced into {event.extra['into']})"
            if event.reason == "excluded" and event.extra.get("calendar"):
                result = f"skipped (excluded by {event.extra['calendar']})"
        rows.append(
            (
                when(event.scheduled_at, zone, now),
                fmt.duration(event.late_ms) if event.late_ms is not None else "-",
                event.origin or name,
                result,
                exec_id or "-",
            )
        )
        data.append({**event.as_dict(), "outcome": result})
        if len(rows) == 10:
            break
    return rows, data


async def cmd_show(client: Client, args: argparse.Namespace) -> None:
    s = await client.get(args.id)
    coming = await client.upcoming(args.id, 5, with_excluded=bool(s.exclude))
    history = (await client.history(args.id, limit=PAGE_MAX)).items  # every kept run
    now = to_ms(await client.server_time())
    zone = s.timezone
    runs = f"{s.runs}" + (f" of {s.max_runs}" if s.max_runs else "")
    pairs: list[tuple[str, object]] = [
        ("id", s.id),
        ("task", s.task),
        ("queue", s.queue),
        ("trigger", fmt.trigger_text(s)),
        ("timezone", zone),
        (
            ("payload", orjson.dumps(s.payload).decode())
            if s.http is None
            else ("http", _target_text(s.http))
        ),
        ("status", fmt.status_text(s) + (f" ({s.pause_note})" if s.pause_note else "")),
        ("next run", when(s.next_run, zone, now) if not s.paused else "-"),
        ("last run", when(s.last_run, zone, now)),
        ("runs", runs),
        ("generation", s.generation),
        ("window", f"{s.start_at or '-'} .. {s.end_at or '-'}"),
        ("overlap", s.overlap),
        ("priority", s.priority),
        ("misfire", f"{s.misfire} (grace {fmt.duration(s.misfire_grace_s * 1000)})"),
        ("retries", fmt.retries(s.max_retries, s.retry_base_s, s.retry_multiplier, s.retry_max_s)),
        ("timeout", fmt.duration(s.timeout_s * 1000)),
        ("limits", _shown(s.limits, "limits")),
        ("source", s.source or "sdk/cli"),
        ("created", when(s.created_at, zone, now)),
        ("updated", when(s.updated_at, zone, now)),
    ]
    if s.description:
        pairs.insert(1, ("description", s.description))
    dst = fmt.dst_text(s)
    if dst is not None:
        pairs.insert([name for name, _ in pairs].index("timezone") + 1, ("dst", dst))
    if s.debounce:
        at = [name for name, _ in pairs].index("overlap") + 1
        pairs.insert(at, ("debounce", fmt.duration(s.debounce * 1000)))
    if s.start_deadline is not None:
        at = [name for name, _ in pairs].index("timeout") + 1
        pairs.insert(at, ("start deadline", fmt.duration(s.start_deadline * 1000)))
    if s.pause_after_failures is not None:
        at = [name for name, _ in pairs].index("status") + 1
        pairs.insert(at, ("pause after", _failures_text(s)))
    at = [name for name, _ in pairs].index("trigger") + 1
    if s.jitter is not None:
        pairs.insert(at, ("jitter", fmt.duration(s.jitter * 1000)))
    if s.exclude:
        pairs.insert(at, ("exclude", ", ".join(s.exclude)))
    rows, run_data = _runs(history, zone, now)
    text = fmt.fields(pairs)
    text += "\n\nnext fire times" + (" (if resumed now)" if s.paused else "") + ":\n"
    text += "\n".join(f"  {_occurrence_text(o, zone, now)}" for o in coming) or "  none"
    text += "\n\nlast runs:\n"
    if rows:
        table = fmt.table(("SCHEDULED", "LATE", "ORIGIN", "OUTCOME", "EXECUTION"), rows)
        text += "\n".join("  " + line for line in table.splitlines())
    else:
        text += "  none yet"
    out(
        args,
        {
            "schedule": {**s.public_dict(), "http": None if s.http is None else masked(s.http)},
            "next": [o.fires_at.isoformat() for o in coming if not o.excluded_by],
            "upcoming": [_occurrence_data(o) for o in coming],
            "runs": run_data,
        },
        text,
    )


def _target_text(target: dict[str, Any]) -> str:
    """An HTTP target for ``rsched show``: method, URL, then its options (never the secret)."""
    timeout = fmt.duration(float(target.get("timeout_s", DEFAULT_TIMEOUT_S)) * 1000)
    parts = [display(target), f"timeout {timeout}"]
    if target.get("headers"):
        parts.append("headers " + ", ".join(sorted(target["headers"])))
    if "body" in target:
        parts.append(f"body {len(request_body(target)[0])} bytes")
    if target.get("secret"):
        parts.append("own secret")
    if target.get("follow_redirects"):
        parts.append("follows redirects")
    return "; ".join(parts)


def _occurrence_text(o: Occurrence, zone: str, now: int) -> str:
    """A coming occurrence for ``rsched show``: when it fires, its time under a jitter, and the
    calendar that excludes it."""
    text = fmt.when(to_ms(o.fires_at), zone, now)
    if o.fires_at != o.at:
        delay = fmt.duration(to_ms(o.fires_at) - to_ms(o.at))
        text += f"  (occurrence {fmt.clock(to_ms(o.at), zone)}, jitter +{delay})"
    if o.excluded_by:
        text = f"{fmt.when(to_ms(o.at), zone, now)}  excluded by {o.excluded_by}: not run"
    return text


def _occurrence_data(o: Occurrence) -> dict[str, Any]:
    return {
        "at": o.at.isoformat(),
        "fires_at": o.fires_at.isoformat(),
        "excluded_by": o.excluded_by,
    }


def _failures_text(s: Schedule) -> str:
    """``pause_after_failures`` and where the count stands, for ``rsched show``."""
    runs = "run" if s.pause_after_failures == 1 else "runs in a row"
    return f"{s.pause_after_failures} failed {runs} ({s.consecutive_failures} in a row now)"


async def cmd_next(client: Client, args: argparse.Namespace) -> None:
    s = await client.get(args.id)
    times = await client.next_runs(args.id, args.limit)
    now = to_ms(await client.server_time())
    out(
        args,
        [t.isoformat() for t in times],
        "\n".join(fmt.when(to_ms(t), s.timezone, now) for t in times) or "no more fire times",
    )


#: Fields of an event that ``rsched history`` shows in columns of their own.
_HISTORY_COLUMNS = frozenset({"event", "at", "scheduled_at", "execution_id", "late_ms"})


async def cmd_history(client: Client, args: argparse.Namespace) -> None:
    if getattr(args, "specs", False):
        await cmd_specs(client, args)
        return
    s = await client.get(args.id)
    page = await client.history(args.id, limit=args.limit, status=args.status, cursor=args.cursor)
    now = to_ms(await client.server_time())
    rows = []
    for e in page:
        detail = {k: v for k, v in e.as_dict().items() if k not in _HISTORY_COLUMNS}
        rows.append(
            (
                when(e.at, s.timezone, now),
                e.event,
                fmt.clock(to_ms(e.scheduled_at), s.timezone) if e.scheduled_at else "-",
                fmt.duration(e.late_ms) if e.late_ms is not None else "-",
                e.execution_id or "-",
                " ".join(f"{k}={v}" for k, v in detail.items()),
            )
        )
    headers = ("AT", "EVENT", "SCHEDULED", "LATE", "EXECUTION", "DETAIL")
    text = fmt.table(headers, rows) if rows else "no events"
    if page.cursor:
        text += f"\nmore: rsched history {args.id} --cursor {page.cursor}"
    out(args, {"events": [e.as_dict() for e in page], "cursor": page.cursor}, text)


async def cmd_backfill(client: Client, args: argparse.Namespace) -> None:
    result = await client.backfill(args.id, args.start, args.end)
    # Backfilled occurrences are never skipped (the overlap policy only orders them); the key
    # stays for --json readers.
    kinds = ("fired", "buffered", "skipped", "debounced", "already_fired")
    counts = {k: result.count(k) for k in kinds}
    said = [f"{counts['fired']} fired", f"{counts['buffered']} buffered"]
    for kind in ("skipped", "debounced"):
        if counts[kind]:
            said.append(f"{counts[kind]} {kind}")
    said.append(f"{counts['already_fired']} already fired")
    lines = [f"{len(result.outcomes)} occurrence(s): " + ", ".join(said)]
    if counts["buffered"]:
        lines.append("  buffered ones run one after another, each when the run before it ends")
    if counts["debounced"]:
        lines.append(
            "  debounced ones joined the schedule's debounce window: one job runs for them"
        )
    lines += [f"  {eid}  {status}" for eid, status in result.outcomes.items()]
    out(args, {"counts": counts, "outcomes": result.outcomes}, "\n".join(lines))


async def cmd_sync(client: Client, args: argparse.Namespace) -> None:
    # A file sync is a deployment's own write path (rsched-scheduler --schedules runs it too),
    # not a client call: it gets a connection of its own.
    redis = connect(client.settings)
    try:
        plan = await sync_file(
            redis,
            client.settings,
            args.file,
            dry_run=args.dry_run,
            adopt=args.adopt,
            actor=client.author.actor,
        )
    finally:
        await redis.aclose()
    out(args, plan.as_dict(), "\n".join(plan.lines()))


def _utc_offset(dt: datetime) -> str:
    minutes = int((dt.utcoffset() or timedelta()).total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _minutes(offset: str) -> int:
    hours, minutes = offset[1:].split(":")
    return (1 if offset[0] == "+" else -1) * (int(hours) * 60 + int(minutes))


def cmd_cron(args: argparse.Namespace) -> None:
    """Preview a cron expression: its next fire times in a zone and in UTC, with rsched's DST
    rules, each change of the zone's UTC offset marked. Creates nothing; needs no Redis."""
    try:
        check_page(args.limit)
    except ValueError as exc:
        raise InvalidArgument("limit", str(exc)) from None
    try:
        zone = resolve_timezone(canonical_timezone(args.timezone))  # the zones a schedule takes
    except ValueError as exc:
        raise InvalidArgument("timezone", str(exc)) from None
    after = args.after or datetime.now(UTC)
    if after.tzinfo is None:
        after = after.replace(tzinfo=zone)
    try:
        preview = Schedule(
            id="preview",
            task="preview",
            cron=args.expression,
            timezone=zone.key,
            dst_gap=args.dst_gap,
            dst_fold=args.dst_fold,
        )
    except InvalidSchedule as exc:  # the cron parser's own message, on one line
        raise InvalidArgument(
            "expression", " ".join("; ".join(m for _, m in exc.errors).split())
        ) from None
    excluded = [calendar_file(path) for path in args.exclude or ()]
    times = next_fire_times(preview, after, args.limit, excluded)
    previous = _utc_offset(after.astimezone(zone))
    rows, data = [], []
    for t in times:
        offset = _utc_offset(t)
        change = ""
        if offset != previous:
            shift = fmt.duration(abs(_minutes(offset) - _minutes(previous)) * 60_000)
            way = "forward" if _minutes(offset) > _minutes(previous) else "back"
            change = f"UTC{previous} -> UTC{offset} (clocks go {way} {shift})"
        previous = offset
        utc = t.astimezone(UTC)
        rows.append((fmt.clock(to_ms(t), zone.key), utc.strftime("%Y-%m-%d %H:%M:%S UTC"), change))
        data.append(
            {
                "at": t.isoformat(),
                "utc": utc.isoformat(),
                "utc_offset": offset,
                "transition": change or None,
            }
        )
    head = f"cron {args.expression!r} in {zone.key}, after {after.isoformat(timespec='seconds')}"
    if args.dst_gap or args.dst_fold:
        head += f"; DST {fmt.dst_text(preview)}"
    if excluded:
        head += f"; leaving out what {', '.join(c.name for c in excluded)} exclude"
    if not rows:
        text = f"{head}: no fire time within 50 years"
    else:
        table = fmt.table((f"FIRE TIME ({zone.key})", "UTC", ""), rows)
        text = f"{head}:\n{table}"
    doc = {"expression": args.expression, "timezone": zone.key, "times": data}
    doc["excluded_by"] = [c.name for c in excluded]
    out(args, doc | {"dst_gap": preview.dst_gap, "dst_fold": preview.dst_fold}, text)
