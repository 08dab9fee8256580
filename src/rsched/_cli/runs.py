"""``rsched runs``: the runs log across schedules and enqueued jobs: the runs in progress
first, then the others by when they ended, newest first (the log's own order)."""

from __future__ import annotations

import argparse
from datetime import datetime

from rsched._cli.common import out
from rsched._client.client import Client
from rsched._core import humanize as fmt
from rsched._core.schedule import to_ms


def _ms(moment: datetime | None) -> int | None:
    return to_ms(moment) if moment is not None else None


async def cmd_runs(client: Client, args: argparse.Namespace) -> None:
    page = await client.runs(
        status=args.status,
        since=args.since,
        schedule_id=args.schedule,
        task=args.task,
        limit=args.limit,
        cursor=args.cursor,
        labels=args.labels,
    )
    now = to_ms(await client.server_time())
    rows = []
    for r in page:
        took = None
        if r.started_at and r.ended_at:
            took = fmt.duration(round((r.ended_at - r.started_at).total_seconds() * 1000))
        error = f"{r.error_type or ''}: {r.error or ''}".strip(": ")
        rows.append(
            (
                fmt.relative(_ms(r.started_at), now),
                fmt.relative(_ms(r.ended_at), now),
                r.status,
                r.schedule_id or "-",
                r.task,
                r.queue,
                r.attempt,
                took or "-",
                r.execution_id,
                error[:60] or "-",
            )
        )
    headers = (
        "STARTED", "ENDED", "STATUS", "SCHEDULE", "TASK", "QUEUE", "ATT", "TOOK", "EXECUTION",
        "ERROR",
    )  # fmt: skip
    text = fmt.table(headers, rows) if rows else "no runs"
    if page.cursor:
        text += f"\nmore: rsched runs --cursor {page.cursor} (with the same filters)"
    out(args, {"runs": [r.as_dict() for r in page], "cursor": page.cursor}, text)


def add_parser(sub: argparse.ArgumentParser) -> None:
    """The options of ``rsched runs``."""
    sub.add_argument("--status", help="only this status: fired, started, completed, failed, …")
    sub.add_argument("--since", help="only runs of the last 1h, 30m, 2d, …")
    sub.add_argument("--schedule", help="only runs of this schedule id")
    sub.add_argument("--task", help="only runs of this task")
    sub.add_argument(
        "--label",
        dest="labels",
        action="append",
        metavar="K=V",
        help="only runs of jobs enqueued with this label; repeat for several (all must match)",
    )
    sub.add_argument("--cursor", help="continue from a previous page (older runs)")
