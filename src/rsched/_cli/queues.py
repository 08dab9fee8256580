"""``rsched`` commands on queues: ``enqueue``, ``dead ls|show|requeue|purge`` and ``stats``."""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import itertools
from collections.abc import Mapping
from typing import Any

from rsched._cli.common import each, out, report
from rsched._cli.workers import warn_if_no_worker_has
from rsched._client import bulk_actions
from rsched._client.client import Client
from rsched._client.stats import Lease, Stats
from rsched._core import humanize as fmt
from rsched._core.errors import UsageError
from rsched._core.job import DeadLetter
from rsched._core.rules import PAGE_MAX, label_pairs, parse_duration_s
from rsched._core.schedule import from_ms, to_ms


def delay_s(text: str) -> float:
    """``--delay``: a duration as everywhere in the CLI (``90s``, ``5m``), 0 meaning none."""
    try:
        return parse_duration_s(text, allow_zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def cmd_enqueue(client: Client, args: argparse.Namespace) -> None:
    done = await client.enqueue(
        args.task,
        args.payload,
        queue=args.queue,
        delay=args.delay,
        max_retries=args.max_retries,
        timeout_s=args.timeout_s,
        execution_id=args.execution_id,
        priority=args.priority,
        limits=args.limits or (),
        debounce_key=args.debounce_key,
        debounce=args.debounce,
        start_deadline=args.start_deadline,
        labels=args.labels,
    )
    where = f"queue {args.queue}" + ("" if args.priority == "normal" else f" ({args.priority})")
    if args.debounce_key is not None:
        seconds = parse_duration_s(args.debounce)  # checked by enqueue
        how = "opened" if done.created else "joined"
        text = (
            f"{done.execution_id} on {where}: debounce window {args.debounce_key} {how}, the job "
            f"runs {fmt.duration(seconds * 1000)} after the last call"
        )
    elif not done.created:
        text = (
            f"{done.execution_id} already there (queued, running or finished inside the dedup "
            "window): nothing added"
        )
    elif args.delay:
        text = f"{done.execution_id} enqueued on {where}, due in {fmt.duration(args.delay * 1000)}"
    else:
        text = f"{done.execution_id} enqueued on {where}"
    out(args, {"execution_id": done.execution_id, "created": done.created}, text)
    await warn_if_no_worker_has(client, args.task, args.queue)


def _letter(d: DeadLetter) -> dict[str, Any]:
    """The dead letter as shown to operators (its raw job fields left out)."""
    data = {f.name: getattr(d, f.name) for f in dataclasses.fields(d) if f.name != "job_fields"}
    data["dead_at"] = d.dead_at.isoformat()
    return data


def _queue_cursors(cursor: str) -> dict[str, str]:
    """``rsched dead ls``'s cursor over every queue: ``queue=entry id`` of each queue with more
    to show (an empty id: from its newest), comma-separated; queue names and entry ids hold
    neither ``,`` nor ``=``."""
    pairs = [part.partition("=") for part in cursor.split(",")]
    if not all(queue and eq for queue, eq, _ in pairs):
        raise UsageError(
            f"--cursor: {cursor!r} is not a cursor of rsched dead ls over every queue; pass the "
            "one it printed (a --queue listing's cursor goes with that --queue)"
        )
    return {queue: after for queue, _, after in pairs}


async def _every_queue(
    client: Client, args: argparse.Namespace
) -> tuple[list[DeadLetter], str | None]:
    """A page of the dead letters of every queue, newest first, and the cursor of the next."""
    if args.cursor:
        cursors = _queue_cursors(args.cursor)
    else:
        stats = await client.stats()
        cursors = {q: "" for q, counts in sorted(stats.queues.items()) if counts.get("dead")}
    pages = {
        q: await client.dead_letters(q, limit=args.limit, cursor=after or None, task=args.task)
        for q, after in cursors.items()
    }
    # A merge keeps each queue's order, so what a page shows of a queue is the start of its page.
    merged = heapq.merge(*(p.items for p in pages.values()), key=lambda d: d.dead_at, reverse=True)
    shown = list(itertools.islice(merged, args.limit))
    left = {}
    for q, page in pages.items():
        taken = [d.entry_id for d in shown if d.queue == q]
        if len(taken) < len(page.items):  # more of this page to show: after the last one taken
            left[q] = taken[-1] if taken else cursors[q]
        elif page.cursor is not None:
            left[q] = page.cursor
    return shown, ",".join(f"{q}={after}" for q, after in left.items()) or None


async def cmd_dead_ls(client: Client, args: argparse.Namespace) -> None:
    if args.queue is None:
        letters, cursor = await _every_queue(client, args)
    else:
        page = await client.dead_letters(
            args.queue, limit=args.limit, cursor=args.cursor, task=args.task
        )
        letters, cursor = page.items, page.cursor
    now = to_ms(await client.server_time())
    rows = [
        (
            d.queue,
            d.entry_id,
            d.task,
            d.reason,
            f"{d.error_type}: {d.error_message}".strip(": ")[:80] or "-",
            d.attempt,
            fmt.relative(to_ms(d.dead_at), now),
        )
        for d in letters
    ]
    where = f"queue {args.queue}" if args.queue else "any queue"
    text = (
        fmt.table(("QUEUE", "ENTRY", "TASK", "REASON", "ERROR", "ATTEMPT", "DIED"), rows)
        if rows
        else f"no dead letters in {where}"
    )
    if cursor:
        narrow = f" --queue {args.queue}" if args.queue else ""
        narrow += f" --task {args.task}" if args.task else ""
        text += f"\nmore: rsched dead ls{narrow} --cursor '{cursor}'"
    out(args, {"dead_letters": [_letter(d) for d in letters], "cursor": cursor}, text)


async def cmd_dead_show(client: Client, args: argparse.Namespace) -> None:
    d = await client.dead_letter(args.queue, args.entry_id)
    data = _letter(d)
    pairs = [(k, v) for k, v in data.items() if k != "traceback"]
    text = fmt.fields(pairs) + "\n\ntraceback:\n" + (d.traceback or "-")
    out(args, data, text)


def _selection(args: argparse.Namespace) -> list[str] | None:
    if args.entry_ids and args.all:
        raise UsageError("give entry ids or --all, not both")
    if not args.entry_ids and not args.all and not args.task:
        raise UsageError("give entry ids, --task TASK or --all")
    return list(args.entry_ids) or None


async def _dead_by_filter(client: Client, args: argparse.Namespace, verb: str) -> None:
    """``dead requeue|purge`` with ``--label`` or ``--dry-run``: the dead letters selected (the
    ids given, or those of the queue with every label and of ``--task``), printed with a count,
    then acted on unless it is a dry run (docs/labels.md)."""
    if args.entry_ids and (args.labels or args.task or args.all):
        raise UsageError("give entry ids or a filter (--label, --task, --all), not both")
    if args.entry_ids:
        ids = list(dict.fromkeys(args.entry_ids))
    else:
        if args.labels:
            bulk_actions.check_filter(args.labels, args.task, None)  # names --label when bad
        wanted = set(args.labels or ())
        ids, cursor = [], None
        while True:
            page = await client.dead_letters(
                args.queue, limit=PAGE_MAX, cursor=cursor, task=args.task
            )
            ids += (d.entry_id for d in page.items if wanted <= _label_pairs(d.job_fields))
            cursor = page.cursor
            if cursor is None:
                break
    lines = [*ids, f"{len(ids)} dead letter(s) of queue {args.queue} selected"]
    data: dict[str, Any] = {"selected": ids, "dry_run": bool(args.dry_run)}
    if args.dry_run or not ids:
        lines.append("dry run: nothing changed" if args.dry_run else "nothing to do")
        out(args, data, "\n".join(lines))
        return
    act = client.requeue if verb == "requeued" else client.purge
    data[verb] = n = await act(args.queue, ids)
    where = "onto" if verb == "requeued" else "from"
    out(args, data, f"{verb} {n} dead letter(s) {where} queue {args.queue}")


def _label_pairs(fields: Mapping[str, str]) -> set[str]:
    return set(label_pairs(fields.get("labels") or ""))


async def _dead_command(client: Client, args: argparse.Namespace, verb: str) -> None:
    """``dead requeue`` / ``dead purge``: by ids (each must exist: a missing one is an error,
    the others are still done), or every dead letter of the queue (of ``--task``)."""
    if args.labels or args.dry_run:
        await _dead_by_filter(client, args, verb)
        return
    act = client.requeue if verb == "requeued" else client.purge
    where = "onto" if verb == "requeued" else "from"
    ids = _selection(args)
    if ids is None:
        n = await act(args.queue, None, task=args.task)
        out(args, {verb: n}, f"{verb} {n} dead letter(s) {where} queue {args.queue}")
        return

    async def one(entry_id: str) -> tuple[str, Any]:
        letter = await client.dead_letter(args.queue, entry_id)  # DeadLetterNotFound
        if args.task is not None and letter.task != args.task:
            return f"left {entry_id} (task {letter.task}, not {args.task})", None
        done = await act(args.queue, [entry_id])
        if not done:  # gone meanwhile (another requeue or purge)
            return f"left {entry_id} (gone meanwhile)", None
        return f"{verb} {entry_id} {where} queue {args.queue}", entry_id

    report(args, verb, await each(ids, one), f"dead letter(s) not {verb}")


async def cmd_dead_requeue(client: Client, args: argparse.Namespace) -> None:
    await _dead_command(client, args, "requeued")


async def cmd_dead_purge(client: Client, args: argparse.Namespace) -> None:
    await _dead_command(client, args, "purged")


def _leaders(leaders: list[Lease | None]) -> list[str]:
    """Who leads how many partitions, and which have no leader."""
    owners: dict[str, int] = {}
    for lead in leaders:
        if lead is not None:
            owners[lead["owner"]] = owners.get(lead["owner"], 0) + 1
    lines = [f"leader:    {o} ({n} partition(s))" for o, n in sorted(owners.items())]
    missing = [str(k) for k, lead in enumerate(leaders) if lead is None]
    if len(missing) == len(leaders):
        lines.append("leader:    none (no scheduler is running)")
    elif missing:
        lines.append(f"leader:    none for partition(s) {', '.join(missing)}")
    return lines


async def cmd_stats(client: Client, args: argparse.Namespace) -> None:
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
    if st.partitions > 1:
        lines += _leaders(st.leaders)
    elif st.leader:
        ld = st.leader
        lines.append(
            f"leader:    {ld['owner']} (token {ld['token']}, renewed "
            f"{fmt.duration(ld['lease_age_ms'])} ago, "
            f"expires in {fmt.duration(ld['lease_left_ms'])})"
        )
    else:
        lines.append("leader:    none (no scheduler is running)")
    lines.append(f"partitions: {st.partitions}")
    lines.append(f"dead letters: {st.dead_letters}")
    if st.queues:
        rows = [
            (
                name,
                q.get("length"),
                q.get("pending"),
                q.get("delayed"),
                q.get("dead"),
                q.get("workers", 0),
                q.get("consumers"),
                fmt.duration(oldest) if (oldest := q.get("oldest_pending_ms")) else "-",
            )
            for name, q in st.queues.items()
        ]
        headers = (
            "QUEUE", "LENGTH", "PENDING", "DELAYED", "DEAD", "LIVE WORKERS", "CONSUMERS",
            "OLDEST PENDING",
        )  # fmt: skip
        lines += [
            "",
            fmt.table(headers, rows),
            "live workers: registered workers reading the queue now; consumers: names in its "
            "consumer group (dead workers' linger until they hold nothing for an hour)",
        ]
    out(args, _stats_json(st), "\n".join(lines))


def _stats_json(st: Stats) -> dict[str, Any]:
    """``Stats.as_dict`` with its moments in ISO 8601, as every ``--json`` of the CLI gives times
    (``now``, ``oldest_overdue.next_run``); durations stay in ms (``late_ms``, ``lease_age_ms``)."""
    data = st.as_dict()
    data = {"now": from_ms(data.pop("now_ms")).isoformat(), **data}
    overdue = data["oldest_overdue"]
    if overdue is not None:
        next_ms = overdue.pop("next_run_ms")
        data["oldest_overdue"] = {
            "id": overdue.pop("id"),
            "next_run": from_ms(next_ms).isoformat(),
            **overdue,
        }
    return data
