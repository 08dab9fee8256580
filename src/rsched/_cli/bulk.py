"""``rsched pause|resume|rm|trigger`` and ``rsched cancel`` on what a filter selects
(``--label K=V``, ``--task``, ``--queue``) instead of ids, with ``--dry-run`` (docs/labels.md).

A filter's command always prints what it touches (each id, then a count) before it acts, so an
operator sees what a filter matched; ``--dry-run`` prints that and changes nothing. Ids and a
filter together, or a bulk command with neither, are refused: a filter never widens by omission.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from rsched._cli.common import out
from rsched._client.client import Client
from rsched._core.bulk import BulkResult
from rsched._core.errors import UsageError


def filter_options(p: argparse.ArgumentParser, what: str, *, labels: bool = True) -> None:
    """The filter flags of a bulk command (AND of all given) and ``--dry-run``."""
    if labels:
        p.add_argument(
            "--label",
            dest="labels",
            action="append",
            metavar="K=V",
            help=f"{what} carrying this label; repeat for several (all must match)",
        )
    p.add_argument("--task", help=f"{what} of this task")
    p.add_argument("--queue", help=f"{what} of this queue")
    p.add_argument(
        "--dry-run", action="store_true", help="print what the filter selects, change nothing"
    )


def has_filter(args: argparse.Namespace) -> bool:
    """Whether the command was given a filter (then it acts on what the filter selects)."""
    return any(getattr(args, n, None) for n in ("labels", "task", "queue"))


def check_targets(args: argparse.Namespace, ids: list[str], noun: str) -> None:
    """Refuse ids mixed with a filter, and a command with neither."""
    flags = (
        "--label K=V, --task T or --queue Q" if hasattr(args, "labels") else "--task T or --queue Q"
    )
    if ids and has_filter(args):
        raise UsageError(
            f"give {noun} ids or a filter ({flags}), not both: a filter selects the {noun}s itself"
        )
    if not ids and not has_filter(args):
        raise UsageError(f"give the {noun} ids, or a filter ({flags}) to select them")


async def by_filter(
    client: Client,
    args: argparse.Namespace,
    select: Callable[[], Awaitable[list[str]]],
    act: Callable[[list[str]], Awaitable[BulkResult]],
    verb: str,
    noun: str,
) -> None:
    """Select, print what was selected, then (unless ``--dry-run``) act and print each id's
    outcome and the counts."""
    ids = await select()
    data: dict[str, Any] = {"selected": ids, "dry_run": bool(args.dry_run)}
    lines = [*ids, f"{len(ids)} {noun}(s) selected"]
    if args.dry_run or not ids:
        lines.append("dry run: nothing changed" if args.dry_run else f"nothing to {verb}")
        out(args, data, "\n".join(lines))
        return
    result = await act(ids)
    data["outcomes"] = result.outcomes
    lines = [f"{got} {one}" for one, got in result.outcomes.items()]
    lines.append(f"{len(ids)} {noun}(s): {result.summary()}")
    out(args, data, "\n".join(lines))
