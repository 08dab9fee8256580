"""A running job's progress and log, as handlers write them and readers see them (pure).

A handler reports with ``job.set_progress(fraction, note)`` and ``job.log(message)``; records of
the standard ``logging`` made inside it are kept too. The worker buffers them and writes them in
the background (rsched._worker.journal, lua/job_log.lua): one list per attempt of the newest
:data:`MAX_LINES` lines and at most :data:`MAX_BYTES` bytes, and one progress hash per job,
both kept as long as the job's result (``worker.result_ttl_s``). docs/keys.md has the layout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import orjson

if TYPE_CHECKING:
    from rsched._core.job import Job

#: An attempt's log keeps its newest lines: this many at most ...
MAX_LINES = 200
#: ... holding at most this many bytes (of stored JSON lines).
MAX_BYTES = 64 * 1024
#: A longer message is cut to this many characters (a line must fit in MAX_BYTES).
MESSAGE_MAX_CHARS = 8 * 1024
#: A longer progress note is cut to this many characters.
NOTE_MAX_CHARS = 500
#: The levels of a log line, as the logging module names them (lower case).
LEVELS = ("debug", "info", "warning", "error", "critical")


class JobJournal(Protocol):
    """Where a running job's progress and log lines go (the worker's journal); its calls
    never block and never raise."""

    def progress(self, job: Job, fraction: float, note: str) -> None: ...

    def line(self, job: Job, level: str, message: str) -> None: ...


@dataclass(frozen=True, slots=True)
class JobProgress:
    """A job's latest progress (see ``Job.set_progress``): ``fraction`` from 0 to 1, the
    handler's ``note`` (None without one), ``at`` when it was set (the worker's clock, aware
    UTC) and the ``attempt`` that set it. Since 0.1.0."""

    fraction: float
    note: str | None
    at: datetime
    attempt: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "fraction": self.fraction,
            "note": self.note,
            "at": self.at.isoformat(),
            "attempt": self.attempt,
        }


@dataclass(frozen=True, slots=True)
class JobLogRecord:
    """One line of a job's log (see :meth:`rsched.Client.job_logs`): ``at`` (the worker's
    clock, aware UTC), ``level`` (``debug``, ``info``, ``warning``, ``error``, ``critical``),
    ``message``, and the ``attempt`` whose handler wrote it. Since 0.1.0."""

    attempt: int
    at: datetime
    level: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "at": self.at.isoformat(),
            "level": self.level,
            "message": self.message,
        }


def at_ms(ms: int) -> datetime:
    """Epoch ms -> aware UTC datetime (exact)."""
    return _EPOCH + timedelta(milliseconds=ms)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def check_fraction(fraction: object) -> float:
    """A progress fraction as a float; raises ValueError unless it is a number from 0 to 1."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise ValueError(f"give a number from 0 to 1, not {fraction!r}")
    if not (math.isfinite(fraction) and 0 <= fraction <= 1):
        raise ValueError(f"give a number from 0 to 1 (0.25 for a quarter), not {fraction!r}")
    return float(fraction)


def cut(text: str, most: int) -> str:
    """``text``, cut to ``most`` characters (the cut marked with an ellipsis)."""
    return text if len(text) <= most else text[: most - 1] + "…"


def encode_line(ms: int, level: str, message: str) -> bytes:
    """The stored JSON of a log line: ``[ms, level, message]``."""
    return orjson.dumps([ms, level, message])


def parse_line(raw: str | bytes, attempt: int) -> JobLogRecord | None:
    """A stored log line; None when it is not one rsched wrote (skipped)."""
    try:
        ms, level, message = orjson.loads(raw)
        return JobLogRecord(attempt, at_ms(int(ms)), str(level), str(message))
    except (orjson.JSONDecodeError, TypeError, ValueError, OverflowError):
        return None


def parse_progress(fields: Mapping[str, str]) -> JobProgress | None:
    """The progress of a job's progress hash; None when none was set (or it is unreadable)."""
    try:
        fraction = check_fraction(float(fields["fraction"]))
        return JobProgress(
            fraction,
            fields.get("note") or None,
            at_ms(int(fields["at"])),
            int(fields.get("attempt") or 1),
        )
    except (KeyError, ValueError, OverflowError):
        return None


def logged_attempts(fields: Mapping[str, str]) -> list[int]:
    """The attempts whose log a job's progress hash accounts for, in order."""
    out = []
    for name in fields:
        kind, _, attempt = name.partition(":")
        if kind == "bytes" and attempt.isdigit():
            out.append(int(attempt))
    return sorted(out)
