"""``rsched`` commands on exclusion calendars (docs/calendars.md): ``calendars``, ``calendar
show|set|rm|import``; and reading a calendar file for ``rsched cron --exclude``."""

from __future__ import annotations

import argparse
from pathlib import Path

from rsched._cli.common import out
from rsched._client.client import Client
from rsched._core import humanize as fmt
from rsched._core.calendars import Calendar, parse_calendar_file
from rsched._core.errors import InvalidCalendar, UsageError
from rsched._core.rules import check_name


def calendar_file(path: str, name: str | None = None) -> Calendar:
    """The calendar an ICS or plain dates file holds (``rsched calendar import``, ``rsched cron
    --exclude``), named ``name`` or after the file. Raises UsageError naming the file and the
    line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it ({exc})") from None
    label = name or _name_of(path)
    try:
        dates, ranges, description = parse_calendar_file(text, source=path)
        return Calendar.build(label, dates=dates, ranges=ranges, description=description)
    except InvalidCalendar as exc:
        raise UsageError(f"{path}: {exc}") from None


def _name_of(path: str) -> str:
    """A calendar name from a file name: its stem, with what a name may not hold as '-'."""
    stem = "".join(c if c.isalnum() or c in "._-:" else "-" for c in Path(path).stem)
    try:
        return check_name(stem[:100] or "file", "calendar name")
    except ValueError:
        return "file"


def _rows(calendars: list[Calendar]) -> list[tuple[str, ...]]:
    return [
        (
            c.name,
            str(len(c.dates)),
            str(len(c.ranges)),
            ",".join(c.weekdays) or "-",
            c.updated_at.isoformat(timespec="seconds") if c.updated_at else "-",
            c.description or "",
        )
        for c in calendars
    ]


def _detail(c: Calendar) -> str:
    pairs: list[tuple[str, object]] = [("name", c.name)]
    if c.description:
        pairs.append(("description", c.description))
    pairs += [
        ("weekdays", ", ".join(c.weekdays) or "-"),
        ("dates", " ".join(d.isoformat() for d in c.dates) or "-"),
        ("ranges", "; ".join(f"{a.isoformat()} .. {b.isoformat()}" for a, b in c.ranges) or "-"),
        ("updated", c.updated_at.isoformat(timespec="seconds") if c.updated_at else "-"),
    ]
    return fmt.fields(pairs)


async def cmd_calendars(client: Client, args: argparse.Namespace) -> None:
    found = await client.calendars()
    headers = ("NAME", "DATES", "RANGES", "WEEKDAYS", "UPDATED", "DESCRIPTION")
    text = fmt.table(headers, _rows(found)) if found else "no calendars"
    out(args, [c.as_dict() for c in found], text)


async def cmd_calendar_show(client: Client, args: argparse.Namespace) -> None:
    c = await client.calendar(args.name)
    out(args, c.as_dict(), _detail(c))


async def cmd_calendar_set(client: Client, args: argparse.Namespace) -> None:
    if not (args.dates or args.ranges or args.weekdays):
        raise UsageError(
            "give what the calendar excludes: --date 2026-12-25, --range A..B, --weekday sat "
            "(each may repeat; see rsched calendar set --help)"
        )
    c = await client.set_calendar(
        args.name,
        dates=args.dates or (),
        ranges=args.ranges or (),
        weekdays=args.weekdays or (),
        description=args.description,
    )
    out(args, c.as_dict(), f"calendar {c.name} set\n{_detail(c)}")


async def cmd_calendar_import(client: Client, args: argparse.Namespace) -> None:
    read = calendar_file(args.file, args.name)
    if args.merge:
        read = (await client.calendar(args.name)).merged(read)
    c = await client.set_calendar(
        args.name,
        dates=read.dates,
        ranges=read.ranges,
        weekdays=read.weekdays,
        description=args.description or read.description,
    )
    what = f"{len(c.dates)} date(s), {len(c.ranges)} range(s)"
    out(args, c.as_dict(), f"calendar {c.name} set from {args.file}: {what}")


async def cmd_calendar_rm(client: Client, args: argparse.Namespace) -> None:
    await client.remove_calendar(args.name)
    out(args, {"removed": args.name}, f"calendar {args.name} removed")
