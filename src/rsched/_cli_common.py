"""What the ``rsched`` command's parser and handlers share: argument types, output, errors."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import orjson

from rsched import _format as fmt
from rsched._client import Client
from rsched._model import Schedule, to_ms

Handler = Callable[[Client, argparse.Namespace], Awaitable[Any]]


# --- argument types ---------------------------------------------------------------------------


def duration_s(text: str) -> float:
    """``300``, ``90s``, ``5m``, ``1h30m``, ``1.5d``, ``250ms`` -> seconds."""
    try:
        return fmt.parse_duration_s(text)
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
