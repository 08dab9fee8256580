"""``rsched`` commands on flow-control limits (docs/limits.md): ``limits``, ``limit waiting``,
``limit set`` and ``limit clear``; and the ``--limit`` argument of ``enqueue``, ``add``,
``upsert`` and ``update``."""

from __future__ import annotations

import argparse

from rsched._cli.common import out
from rsched._client.client import Client
from rsched._core import humanize as fmt
from rsched._core.errors import InvalidArgument, UsageError
from rsched._core.limits import Limit, LimitInfo, parse_rate
from rsched._core.schedule import to_ms

#: What ``--limit`` takes, for its messages.
LIMIT_SYNTAX = "KEY,concurrency=N and/or KEY,rate=COUNT/PERIOD"
#: The settings ``--limit`` takes after the key.
_NUMBERS = ("concurrency", "rate")


def limit_arg(text: str) -> Limit:
    """``--limit``: a key, then ``,concurrency=N`` and/or ``,rate=100/m`` (``crm,rate=100/m``,
    ``customer:{customer_id},concurrency=1``). The settings are read from the end, so a key may
    hold commas and '=' of its own."""
    key, given = text, {}
    while True:
        head, comma, tail = key.rpartition(",")
        name, eq, value = tail.partition("=")
        if not comma or not eq or name.strip() not in _NUMBERS:
            break
        if name.strip() in given:
            raise argparse.ArgumentTypeError(f"{name.strip()} given twice in {text!r}")
        given[name.strip()] = value.strip()
        key = head
    if not given:
        raise argparse.ArgumentTypeError(
            f"{text!r} caps nothing; give {LIMIT_SYNTAX}, e.g. crm,rate=100/m or "
            "'customer:{customer_id},concurrency=1'"
        )
    concurrency: int | None = None
    if "concurrency" in given:
        try:
            concurrency = int(given["concurrency"])
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"concurrency={given['concurrency']!r} is not a whole number, e.g. concurrency=1"
            ) from None
    try:
        return Limit(key, concurrency=concurrency, rate=given.get("rate"))
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


async def _every_row(client: Client, match: str | None) -> list[LimitInfo]:
    """Every page of ``Client.limits``, each key once, by key."""
    rows: dict[str, LimitInfo] = {}
    cursor: str | None = None
    while True:
        page = await client.limits(match=match, cursor=cursor)
        for row in page.items:
            rows.setdefault(row.key, row)
        cursor = page.cursor
        if cursor is None:
            return [rows[key] for key in sorted(rows)]


async def cmd_limits(client: Client, args: argparse.Namespace) -> None:
    rows = await _every_row(client, args.match)
    table = [
        (
            r.key,
            fmt.concurrency_text(r.concurrency),
            "-" if r.rate is None else str(r.rate),
            r.holders,
            r.waiting,
            r.starts if r.rate is not None else "-",
            fmt.override_text(r.override),
        )
        for r in rows
    ]
    headers = ("KEY", "CONCURRENCY", "RATE", "HOLDERS", "WAITING", "STARTS", "OVERRIDE")
    if table:
        text = fmt.table(headers, table) + (
            "\nthe numbers in force (an override over the declared ones); holders: jobs holding "
            "the key; waiting: jobs waiting on it (rsched limit waiting KEY lists them); starts: "
            "in its current rate window"
        )
    else:
        where = f" matching {args.match!r}" if args.match else ""
        text = f"no limit key in use and no override{where}"
    out(args, [r.to_dict() for r in rows], text)


def _in_force(info: LimitInfo) -> str:
    """``limit key 'c:7': concurrency 1, rate 100/m; 1 holding it, 2 waiting, 1 started in its
    window``."""
    numbers = []
    if info.concurrency is not None:
        numbers.append(f"concurrency {fmt.concurrency_text(info.concurrency)}")
    if info.rate is not None:
        numbers.append(f"rate {info.rate}")
    counts = f"{info.holders} holding it, {info.waiting} waiting"
    if info.rate is not None:
        counts += f", {info.starts} started in its window"
    return f"limit key {info.key!r}: {', '.join(numbers) or 'no cap in force'}; {counts}"


async def cmd_limit_waiting(client: Client, args: argparse.Namespace) -> None:
    try:
        info = await client.limit(args.key)
        jobs = await client.waiting(args.key, limit=args.limit)
    except InvalidArgument as exc:  # KEY or -n/--limit: a usage error
        raise UsageError(f"{exc} (see rsched limit waiting --help)") from None
    now = to_ms(await client.server_time())
    rows = [
        (
            j.execution_id,
            j.task,
            j.queue,
            j.priority,
            j.attempt,
            fmt.relative(to_ms(j.enqueued_at) if j.enqueued_at else None, now),
        )
        for j in jobs
    ]
    text = _in_force(info)
    if rows:
        shown = f"the first {len(rows)} of {info.waiting}, " if info.waiting > len(rows) else ""
        text += "\n" + fmt.table(("EXECUTION", "TASK", "QUEUE", "LEVEL", "ATTEMPT", "SINCE"), rows)
        text += (
            f"\n{shown}in the order they will start (by level: high, normal, low; then by "
            "arrival); since: when each began to wait"
        )
    else:
        text += f"\nno job waits on limit key {args.key!r}"
    out(args, [j.as_dict() for j in jobs], text)


def _what(key: str) -> str:
    return f"limit keys matching {key!r}" if "*" in key else f"limit key {key!r}"


def _concerned(n: int) -> str:
    if not n:
        return "no key it concerns has waiting jobs"
    return f"the waiting jobs of {n} key(s) are looked at again"


async def cmd_limit_set(client: Client, args: argparse.Namespace) -> None:
    if args.concurrency is None and args.rate is None:
        raise UsageError(
            "give --concurrency N (0 pauses the key), --rate 100/m or both "
            "(see rsched limit set --help)"
        )
    try:
        woke = await client.set_limit(args.key, concurrency=args.concurrency, rate=args.rate)
    except InvalidArgument as exc:  # every value here is a flag's or KEY: a usage error
        raise UsageError(f"{exc} (see rsched limit set --help)") from None
    rate = None if args.rate is None else str(parse_rate(args.rate))
    numbers = []
    if args.concurrency is not None:
        numbers.append(f"concurrency {fmt.concurrency_text(args.concurrency)}")
    if rate is not None:
        numbers.append(f"rate {rate}")
    kept = "" if len(numbers) == 2 else "; the other number stays as declared"
    text = f"set {_what(args.key)}: {', '.join(numbers)}{kept}; {_concerned(woke)}"
    data = {"key": args.key, "concurrency": args.concurrency, "rate": rate, "waiting_keys": woke}
    out(args, data, text)


async def cmd_limit_clear(client: Client, args: argparse.Namespace) -> None:
    try:
        woke = await client.clear_limit(args.key)
    except InvalidArgument as exc:
        raise UsageError(f"{exc} (see rsched limit clear --help)") from None
    text = f"cleared {_what(args.key)}: the declared numbers hold again; {_concerned(woke)}"
    out(args, {"key": args.key, "cleared": True, "waiting_keys": woke}, text)
