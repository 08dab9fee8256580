"""``rsched`` commands on health: ``monitor`` (unhealthy schedules), ``health`` (the deployment's
checks, for probes and cron) and ``events`` (the events stream, ``--follow`` to tail it)."""

from __future__ import annotations

import argparse
import sys

import anyio
import orjson

from rsched._cli.common import out
from rsched._client.client import Client
from rsched._core import humanize as fmt
from rsched._core.errors import Unhealthy
from rsched._core.health import Health
from rsched._core.rules import check_count, parse_duration_s
from rsched._store.alerts import HealthEvent

#: ``rsched monitor --watch`` refreshes this often (seconds).
WATCH_S = 3.0
#: ``rsched events --follow`` waits this long per read (seconds; Ctrl-C ends it).
FOLLOW_WAIT_S = 2.0


def duration_or_zero(text: str) -> float:
    """A duration as ``duration_s`` takes it, or 0 (which turns a check off)."""
    try:
        return parse_duration_s(text, allow_zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def count(text: str) -> int:
    """A whole number ≥ 0 (``--max-due``)."""
    try:
        return check_count(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"give a whole number ≥ 0, got {text!r}") from None


def _schedules_text(health: Health) -> str:
    if not health.schedules:
        return "all schedules healthy"
    rows = [(s.id, s.state.upper(), s.reason) for s in health.schedules]
    text = fmt.table(("SCHEDULE", "STATE", "WHY"), rows)
    if health.truncated:
        text += "\n(more late schedules than were read: see health.max_schedules)"
    return text


async def _monitor_once(client: Client, args: argparse.Namespace) -> Health:
    health = await client.health()
    data = {
        "checked_at": health.checked_at.isoformat(),
        "schedules": [s.as_dict() for s in health.schedules],
        "truncated": health.truncated,
    }
    text = _schedules_text(health)
    if args.watch:
        text = f"--- {health.checked_at.isoformat(timespec='seconds')}\n{text}"
    out(args, data, text)
    return health


async def cmd_monitor(client: Client, args: argparse.Namespace) -> None:
    if not args.watch:
        health = await _monitor_once(client, args)
        if health.schedules:
            raise Unhealthy(f"{len(health.schedules)} unhealthy schedule(s)")
        return
    while True:  # until Ctrl-C
        await _monitor_once(client, args)
        sys.stdout.flush()
        await anyio.sleep(args.interval)


async def cmd_health(client: Client, args: argparse.Namespace) -> None:
    health = await client.health(
        max_due=args.max_due,
        max_overdue_s=args.max_overdue,
        dead_letter_window_s=args.dead_letter_window,
    )
    lines = [f"{p.check}: {p.message}" for p in health.problems] or ["healthy"]
    leader = health.leader or "none"
    lines.append(f"leader: {leader}; due now: {health.due}")
    if health.schedules:
        lines += ["", _schedules_text(health)]
    out(args, health.as_dict(), "\n".join(lines))
    if not health.ok:
        raise Unhealthy(", ".join(p.check for p in health.problems))


def _event_line(event: HealthEvent) -> str:
    who = f" {event.schedule_id}" if event.schedule_id else ""
    rest = " ".join(f"{k}={v!r}" if " " in v else f"{k}={v}" for k, v in event.fields.items())
    return f"{event.at.isoformat(timespec='milliseconds')} {event.kind}{who} {rest}".rstrip()


def _print_events(args: argparse.Namespace, events: list[HealthEvent]) -> None:
    for event in events:
        if getattr(args, "json", False):
            sys.stdout.write(orjson.dumps(event.as_dict()).decode() + "\n")
        else:
            print(_event_line(event))
    sys.stdout.flush()


async def cmd_events(client: Client, args: argparse.Namespace) -> None:
    if not args.follow:
        events = await client.events(limit=args.limit, after=args.after)
        if getattr(args, "json", False):
            out(args, [e.as_dict() for e in events], "")
        elif not events:
            print("no events")
        else:
            _print_events(args, events)
        return
    # The last few first, then every new one as it is written.
    events = await client.events(limit=args.limit, after=args.after)
    _print_events(args, events)
    # An empty stream: everything written from now on comes after 0-0.
    cursor = events[-1].id if events else (args.after or "0-0")
    while True:
        events = await client.events(after=cursor, limit=100, wait_s=FOLLOW_WAIT_S)
        if events:
            _print_events(args, events)
            cursor = events[-1].id
