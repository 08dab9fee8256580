"""``rsched flows``, ``rsched flow ID`` and ``rsched flow cancel ID``: flows of steps
(docs/flows.md), listed, drawn as a tree of their steps, and cancelled."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from rsched._cli.common import out
from rsched._client.client import Client
from rsched._core import humanize as fmt
from rsched._core.errors import UsageError
from rsched._core.flows import FlowInfo, FlowStep
from rsched._core.schedule import to_ms

#: The join marker: a step that starts when several steps ended (a barrier, or a step after a
#: group).
JOIN = "⋈"
#: A join lists at most this many of the steps it follows by number.
PARENTS_SHOWN = 5


async def cmd_flows(client: Client, args: argparse.Namespace) -> None:
    page = await client.flows(state=args.state, limit=args.limit, cursor=args.cursor)
    now = to_ms(await client.server_time())
    rows = [
        (
            f.flow_id,
            f.state + (f" (step {f.failed_step})" if f.failed_step else ""),
            f"{f.done_count}/{f.step_count}",
            fmt.relative(to_ms(f.created_at), now),
            fmt.relative(to_ms(f.ended_at), now) if f.ended_at else "-",
            f.schedule_id or "-",
        )
        for f in page
    ]
    headers = ("ID", "STATE", "STEPS", "CREATED", "ENDED", "SCHEDULE")
    text = fmt.table(headers, rows) if rows else "no flows"
    if page.cursor:
        text += f"\nmore: rsched flows --cursor {page.cursor} (with the same filters)"
    out(args, {"flows": [f.as_dict() for f in page], "cursor": page.cursor}, text)


async def cmd_flow(client: Client, args: argparse.Namespace) -> None:
    """``rsched flow ID`` / ``rsched flow cancel ID``."""
    words: list[str] = args.words
    if len(words) == 2 and words[0] == "cancel":
        await _cancel(client, args, words[1])
        return
    if len(words) != 1:
        raise UsageError("give a flow id (rsched flow ID) or rsched flow cancel ID")
    info = await client.flow(words[0])
    now = to_ms(await client.server_time())
    out(args, info.as_dict(), flow_text(info, now))


async def _cancel(client: Client, args: argparse.Namespace, flow_id: str) -> None:
    done = await client.cancel_flow(flow_id)
    if done:
        text = (
            f"cancelled flow {flow_id}: its steps not started never run, its running ones "
            "are stopped by their workers"
        )
    else:
        info = await client.flow(flow_id)
        text = f"flow {flow_id} had ended ({info.state}): nothing to cancel"
    out(args, {"flow_id": flow_id, "cancelled": done}, text)


def flow_text(info: FlowInfo, now: int) -> str:
    """The flow's fields, then its steps as a tree."""
    head = [
        f"flow      {info.flow_id}",
        f"state     {info.state}"
        + (f" (step {info.failed_step} failed it)" if info.failed_step else ""),
        f"steps     {info.done_count}/{info.step_count} ended",
        f"created   {fmt.relative(to_ms(info.created_at), now)}",
    ]
    if info.ended_at is not None:
        took = fmt.duration((info.ended_at - info.created_at).total_seconds() * 1000)
        head.append(f"ended     {fmt.relative(to_ms(info.ended_at), now)} (took {took})")
    if info.schedule_id:
        head.append(f"schedule  {info.schedule_id}")
    if info.labels:
        head.append("labels    " + ", ".join(f"{k}={v}" for k, v in sorted(info.labels.items())))
    return "\n".join([*head, "", *tree_lines(info.steps)])


def _label(s: FlowStep) -> str:
    attempts = f"{s.attempts} attempt{'' if s.attempts == 1 else 's'}"
    if s.barrier:
        text = f"#{s.number} {JOIN} join  {s.state}"
    else:
        text = f"{JOIN} " if len(s.parents) > 1 else ""
        text += f"#{s.number} {s.task}  {s.state}  {attempts}"
        if s.on_failure == "continue":
            text += "  (on failure: continue)"
    if len(s.parents) > 1:
        shown = ", ".join(f"#{p}" for p in s.parents[:PARENTS_SHOWN])
        more = len(s.parents) - PARENTS_SHOWN
        text += f"  after {shown}" + (f" and {more} more" if more > 0 else "")
    return text


def tree_lines(steps: Sequence[FlowStep]) -> list[str]:
    """The steps as a tree: a step that follows one step is drawn under it (the only step
    after one that has no other continues its line, so a chain reads as a list); a step that
    follows several (a join) starts a new tree at the left, marked ⋈ with the steps it
    follows. Every step is drawn once."""
    by_number = {s.number: s for s in steps}

    def under(s: FlowStep) -> list[FlowStep]:
        return [
            by_number[c] for c in s.children if c in by_number and len(by_number[c].parents) == 1
        ]

    lines: list[str] = []
    # (step, prefix of its line, prefix of the lines under it); an explicit stack, not
    # recursion: a chain of thousands of steps must not reach Python's recursion limit.
    tops = [s for s in steps if len(s.parents) != 1 or s.parents[0] not in by_number]
    stack: list[tuple[FlowStep, str, str]] = [(s, "", "") for s in reversed(tops)]
    while stack:
        s, first, rest = stack.pop()
        lines.append(first + _label(s))
        kids = under(s)
        if len(kids) == 1 and len(s.children) == 1:
            stack.append((kids[0], rest, rest))
            continue
        for i in reversed(range(len(kids))):
            last = i == len(kids) - 1
            stack.append(
                (kids[i], rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "))
            )
    return lines


def add_parsers(subs: Any, sub: Any, limit: Any) -> None:
    """``rsched flows`` and ``rsched flow`` (``sub`` and ``limit``: the parser's helpers)."""
    p = sub(
        subs,
        "flows",
        "Flows of steps, newest first: state, steps ended of all, created, ended, schedule",
        "  rsched flows\n  rsched flows --state failed\n  rsched flows -n 100 --json",
        cmd_flows,
    )
    p.add_argument(
        "--state",
        choices=["running", "completed", "failed", "cancelled"],
        help="only flows in this state",
    )
    limit(p, 20, "how many flows (default 20)")
    p.add_argument("--cursor", help="continue from a previous page (older flows)")
    p = sub(
        subs,
        "flow",
        "One flow: its steps as a tree (number, task, state, attempts; ⋈ a join), or cancel it",
        "  rsched flow flow-3f2a…\n  rsched flow nightly-etl-2026-11-28 --json\n"
        "  rsched flow cancel nightly-etl-2026-11-28",
        cmd_flow,
    )
    p.add_argument(
        "words",
        nargs="+",
        metavar="ID | cancel ID",
        help="a flow id to show, or cancel and a flow id to cancel it",
    )
