"""What the ``rsched`` command's parser and handlers share: argument types, output, errors and
the words its messages use (flags and commands, not SDK calls)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from rsched._client.client import Client
from rsched._core import humanize as fmt
from rsched._core.errors import (
    DeadLetterNotFound,
    PartialFailure,
    RschedError,
    ScheduleCompleted,
    ScheduleNotFound,
)
from rsched._core.rules import parse_duration_s
from rsched._core.schedule import to_ms
from rsched._core.words import Words

Handler = Callable[[Client, argparse.Namespace], Awaitable[Any]]
#: A command that needs no Redis (``rsched cron``).
LocalHandler = Callable[[argparse.Namespace], None]


# --- argument types ---------------------------------------------------------------------------


def duration_s(text: str) -> float:
    """``300``, ``90s``, ``5m``, ``1h30m``, ``1.5d``, ``250ms`` -> seconds (> 0)."""
    try:
        return parse_duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def whole(text: str) -> int:
    """A whole number (its range is the rule's to check, naming the flag)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number, e.g. 20") from None


def number(text: str) -> float:
    """A number such as 0.5 (its range is the rule's to check, naming the flag)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number, e.g. 0.5") from None


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


# --- output -----------------------------------------------------------------------------------


def out(args: argparse.Namespace, data: Any, text: str) -> None:
    """Print ``data`` as JSON under ``--json``, else the human ``text``."""
    if getattr(args, "json", False):
        sys.stdout.write(orjson.dumps(data, default=str, option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        print(text)


def when(dt: datetime | None, zone: str, now: int) -> str:
    """``fmt.when`` of an optional datetime."""
    return fmt.when(to_ms(dt) if dt is not None else None, zone, now)


# --- the command line's words ------------------------------------------------------------------

#: Messages name the flags and commands of ``rsched`` (``_core/words.py``): a schedule's fields and
#: job options by the flag of add / upsert / update / enqueue, a read's arguments by theirs.
CLI_WORDS = Words(
    fields={
        "task": "--task", "cron": "--cron", "every": "--every", "at": "--at",
        "timezone": "--tz", "queue": "--queue", "priority": "--priority",
        "payload": "--payload", "start_at": "--start-at", "end_at": "--end-at",
        "dst_gap": "--dst-gap", "dst_fold": "--dst-fold",
        "max_runs": "--max-runs", "max_retries": "--max-retries", "retry_base_s": "--retry-base",
        "retry_multiplier": "--retry-multiplier", "retry_max_s": "--retry-max",
        "retry_jitter": "--retry-jitter", "timeout_s": "--timeout", "overlap": "--overlap",
        "buffer_limit": "--buffer-limit", "misfire": "--misfire",
        "catch_up_limit": "--catch-up-limit", "misfire_grace_s": "--misfire-grace",
        "debounce": "--debounce", "start_deadline": "--start-deadline",
        "pause_after_failures": "--pause-after-failures",
        "description": "--description", "paused": "--paused", "pause_note": "--note",
        "limits": "--limit", "exclude": "--exclude", "jitter": "--jitter",
        "labels": "--label",
    },
    job_fields={
        "task": "TASK", "delay_s": "--delay", "execution_id": "--id",
        "debounce_key": "--debounce-key", "debounce": "--debounce",
    },
    arguments={
        "limit": "-n/--limit", "n": "-n/--limit", "cursor": "--cursor", "start": "--start",
        "end": "--end", "status": "--status", "after": "--after", "note": "--note",
        "timezone": "--tz", "expression": "cron", "since": "--since",
        "schedule_id": "--schedule", "task": "--task", "state": "--state", "queue": "--queue",
        "max_due": "--max-due", "max_overdue_s": "--max-overdue",
        "dead_letter_window_s": "--dead-letter-window", "partitions": "--partitions",
        "concurrency": "--concurrency", "rate": "--rate", "key": "KEY", "match": "--match",
        "attempt": "--attempt", "generation": "--generation", "actor": "--actor",
        "labels": "--label", "ids": "ID",
    },
    setting="{name} {value}",
    one_trigger="--cron '0 2 * * *', --every 5m or --at 2030-01-01T09:00",
    durations="seconds (300) or text such as 90s, 5m, 1h30m or 2d",
    exists=(
        "use rsched upsert {id} … to replace its whole spec or rsched update {id} … to change "
        "some fields"
    ),
    run_now="use rsched enqueue to run a job now",
    set_calendar="rsched calendar set {name} --date YYYY-MM-DD",
    unknown_field="check the spelling against the fields rsched add --help lists",
    json_object="a JSON object",
    limits="--limit crm,rate=100/m (repeat it for several)",
)  # fmt: skip


def error_line(exc: BaseException) -> str:
    """One line for stderr (a multi-line message keeps its first line's prefix)."""
    return f"rsched: error: {exc}"


# --- commands on several ids --------------------------------------------------------------------


@dataclass
class Outcomes:
    """What a command did for each of several ids: (id, line, JSON data) per success, the
    exception per failure."""

    done: list[tuple[str, str, Any]] = field(default_factory=list)
    failed: list[tuple[str, RschedError]] = field(default_factory=list)


#: Failures that concern one id only: the others are still done.
PER_ID = (ScheduleNotFound, ScheduleCompleted, DeadLetterNotFound)


async def each(ids: Sequence[str], act: Callable[[str], Awaitable[tuple[str, Any]]]) -> Outcomes:
    """``act(id)`` for every id, in order; one id's PER_ID failure does not stop the others.
    With a single id its failure is raised as it is."""
    outcomes = Outcomes()
    unique = list(dict.fromkeys(ids))  # each once, in the order given
    for one in unique:
        try:
            line, data = await act(one)
        except PER_ID as exc:
            if len(unique) == 1:
                raise
            outcomes.failed.append((one, exc))
        else:
            outcomes.done.append((one, line, data))
    return outcomes


def report(args: argparse.Namespace, key: str, outcomes: Outcomes, what: str) -> None:
    """Print each id's result (JSON: ``{key: [data of each id done], "failed": [...]}``, an id
    whose data is None was looked at and left alone); raise PartialFailure
    (exit 1) when any id failed, after every other id was done. ``what`` completes
    "1 of 3 …: ids", e.g. "schedule(s) not removed"."""
    if getattr(args, "json", False):
        failed = [
            {"id": one, "error": type(exc).__name__, "message": str(exc)}
            for one, exc in outcomes.failed
        ]
        done = [data for _, _, data in outcomes.done if data is not None]
        out(args, {key: done, "failed": failed}, "")
    else:
        for _, line, _ in outcomes.done:
            print(line)
        for _, exc in outcomes.failed:
            print(error_line(exc), file=sys.stderr)
    if outcomes.failed:
        total = len(outcomes.done) + len(outcomes.failed)
        names = ", ".join(one for one, _ in outcomes.failed)
        raise PartialFailure(f"{len(outcomes.failed)} of {total} {what}: {names}")
