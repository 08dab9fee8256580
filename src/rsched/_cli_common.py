"""What the ``rsched`` command's parser and handlers share: argument types, output, errors."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from rsched import _format as fmt
from rsched._client import Client
from rsched._errors import (
    DeadLetterNotFound,
    InvalidArgument,
    PartialFailure,
    RschedError,
    ScheduleCompleted,
    ScheduleExists,
    ScheduleNotFound,
)
from rsched._model import Schedule, to_ms
from rsched._rules import parse_duration_s

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


def trigger_text(s: Schedule) -> str:
    if s.cron is not None:
        return f"cron {s.cron}"
    if s.every is not None:
        return f"every {fmt.duration(s.every * 1000)}"
    return f"at {fmt.clock(to_ms(s.at), s.timezone)}" if s.at else "-"


def status_text(s: Schedule) -> str:
    return "completed" if s.completed else "paused" if s.paused else "active"


def when(dt: datetime | None, zone: str, now: int) -> str:
    """``fmt.when`` of an optional datetime."""
    return fmt.when(to_ms(dt) if dt is not None else None, zone, now)


# --- errors in the command line's words -------------------------------------------------------

#: SDK methods named in the SDK's messages, and the command that does the same.
SDK_COMMANDS = {
    "add": "rsched add",
    "upsert": "rsched upsert",
    "update": "rsched update",
    "remove": "rsched rm",
    "pause": "rsched pause",
    "resume": "rsched resume",
    "trigger": "rsched trigger",
    "backfill": "rsched backfill",
    "enqueue": "rsched enqueue",
    "get": "rsched show",
    "list": "rsched ls",
    "next_runs": "rsched next",
    "history": "rsched history",
    "requeue": "rsched dead requeue",
    "purge": "rsched dead purge",
}
_CALL = re.compile(r"\b(" + "|".join(SDK_COMMANDS) + r")\(\)")
_PHRASES = {
    "rsched.Schedule's fields": "the fields rsched add --help lists",
    # An `at` in the past: the schedule does not exist yet, so there is nothing to trigger.
    "use trigger() to run a job now": "use rsched enqueue to run a job now",
}
#: SDK arguments named by InvalidArgument, and the flag a command takes for them.
_FLAGS = {
    "limit": "-n/--limit",
    "n": "-n/--limit",
    "cursor": "--cursor",
    "start": "--start",
    "end": "--end",
    "status": "--status",
    "after": "--after",
    "note": "--note",
    "pause_note": "--note",
    "timezone": "--tz",
    "expression": "cron",
}


def cli_words(exc: RschedError) -> RschedError:
    """Put ``exc``'s message in the command line's words (``use rsched upsert`` instead of
    ``use upsert()``, flags instead of argument names); returns it. The message is rewritten in
    place so that the class stays what it was: ``--json`` names it, ``main`` catches it."""
    if isinstance(exc, ScheduleNotFound | DeadLetterNotFound):
        return exc  # their own __str__, already neutral
    text = str(exc)
    if isinstance(exc, ScheduleExists):
        sid = exc.schedule_id
        text = (
            f"schedule {sid!r} already exists; use rsched upsert {sid} … to replace its whole "
            f"spec or rsched update {sid} … to change some fields"
        )
    if isinstance(exc, InvalidArgument) and exc.field in _FLAGS:
        text = f"{_FLAGS[exc.field]}: {text.removeprefix(exc.field + ': ')}"
    for sdk, cli in _PHRASES.items():
        text = text.replace(sdk, cli)
    text = _CALL.sub(lambda m: SDK_COMMANDS[m.group(1)], text)
    exc.args = (text,)
    return exc


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
            outcomes.failed.append((one, cli_words(exc)))
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
