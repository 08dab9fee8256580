"""``rsched audit``, ``rsched history ID --specs`` and ``rsched rollback``: the audit trail (who
changed what, when, from where) and a schedule's kept specs (docs/audit.md)."""

from __future__ import annotations

import argparse
import getpass
import socket

import orjson

from rsched._cli.common import out
from rsched._client.client import Client
from rsched._core import humanize as fmt
from rsched._core.audit import safe_actor
from rsched._core.schedule import to_ms


def default_actor() -> str:
    """``user@host`` of this process (the actor of the command's changes unless RSCHED_ACTOR
    names one), made to fit the actor rule."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return safe_actor(f"{user}@{socket.gethostname().split('.')[0]}") or "cli"


async def cmd_audit(client: Client, args: argparse.Namespace) -> None:
    page = await client.audit(
        args.id, since=args.since, actor=args.actor, limit=args.limit, cursor=args.cursor
    )
    now = to_ms(await client.server_time())
    rows = []
    for r in page:
        gens = "-"
        if r.generation_before is not None or r.generation_after is not None:
            gens = f"{r.generation_before or '-'}->{r.generation_after or '-'}"
        what = "; ".join(p for p in (r.summary(), r.note or "") if p)
        rows.append(
            (
                fmt.relative(to_ms(r.at), now),
                r.action,
                r.id,
                r.actor or "-",
                r.source or "-",
                gens,
                what[:100] or "-",
            )
        )
    headers = ("AT", "ACTION", "ID", "ACTOR", "SOURCE", "GEN", "CHANGES")
    text = fmt.table(headers, rows) if rows else "no changes recorded"
    if page.cursor:
        text += f"\nmore: rsched audit --cursor {page.cursor} (with the same filters)"
    out(args, {"records": [r.as_dict() for r in page], "cursor": page.cursor}, text)


async def cmd_specs(client: Client, args: argparse.Namespace) -> None:
    """``rsched history ID --specs``: the schedule's kept specs, newest first."""
    kept = await client.spec_history(args.id)
    now = to_ms(await client.server_time())
    rows = [
        (
            v.generation,
            fmt.relative(to_ms(v.at), now),
            v.actor or "-",
            v.source or "-",
            orjson.dumps(dict(v.spec)).decode()[:100],
        )
        for v in kept
    ]
    text = (
        fmt.table(("GEN", "AT", "ACTOR", "SOURCE", "SPEC"), rows)
        if rows
        else f"no spec history: {args.id} was never changed since it was added"
    )
    if rows:
        text += f"\nroll back: rsched rollback {args.id} --generation G"
    out(args, {"specs": [v.as_dict() for v in kept]}, text)


async def cmd_rollback(client: Client, args: argparse.Namespace) -> None:
    s = await client.rollback(args.id, args.generation)
    out(
        args,
        s.model_dump(mode="json"),
        f"rolled back {s.id} to the spec of generation {args.generation}: now generation "
        f"{s.generation}",
    )


def add_parser(sub: argparse.ArgumentParser) -> None:
    """The options of ``rsched audit``."""
    sub.add_argument("id", nargs="?", help="only changes of this schedule, calendar or limit key")
    sub.add_argument("--since", help="only changes of the last 1h, 30m, 2d, …")
    sub.add_argument("--actor", help="only changes by this actor (user@host, a user name, …)")
    sub.add_argument("--cursor", help="continue from a previous page (older changes)")
