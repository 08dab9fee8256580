"""Human output for the CLI and the dashboard: tables, times in a zone and UTC, relative times.

(Durations are read by rsched._core.rules.parse_duration_s, the rule every input follows.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rsched._core.cron import Cron
from rsched._core.http_target import display
from rsched._core.limits import Limit, Rate
from rsched._core.schedule import Schedule, to_ms
from rsched._core.timezones import resolve_timezone

_UNITS = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s"))


def retries(count: int, base_s: float, multiplier: float, max_s: float) -> str:
    """A schedule's retry policy in one phrase (``rsched show``, the dashboard):
    ``3 retries, backoff 30s x2 up to 1h``."""
    if count == 0:
        return "no retries"
    times = "1 retry" if count == 1 else f"{count} retries"
    growth = "fixed" if multiplier == 1 else f"x{multiplier:g} up to {duration(max_s * 1000)}"
    return f"{times}, backoff {duration(base_s * 1000)} {growth}"


def duration(ms: float) -> str:
    """``1d2h``, ``3m``, ``5m30s``, ``250ms``: the largest unit and the next one when not 0."""
    rest = abs(int(ms))
    if rest < 1000:
        return f"{rest}ms"
    for i, (size, unit) in enumerate(_UNITS):
        if rest >= size:
            text = f"{rest // size}{unit}"
            if i + 1 < len(_UNITS):
                sub_size, sub_unit = _UNITS[i + 1]
                if sub := (rest % size) // sub_size:
                    text += f"{sub}{sub_unit}"
            return text
    return f"{rest}ms"  # unreachable: rest >= 1000 matches the seconds unit


def relative(ms: int | None, now_ms: int) -> str:
    """``in 3m`` / ``2h ago`` / ``now`` (within a second)."""
    if ms is None:
        return "-"
    delta = ms - now_ms
    if abs(delta) < 1000:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(delta)} ago"


def clock(ms: int | None, zone: str = "UTC") -> str:
    """``2026-11-22 23:00:00 CET`` in the given IANA zone."""
    if ms is None:
        return "-"
    dt = datetime.fromtimestamp(ms / 1000, resolve_timezone(zone))
    return dt.strftime("%Y-%m-%d %H:%M:%S ") + (dt.tzname() or zone)


def when(ms: int | None, zone: str, now_ms: int) -> str:
    """The time in the schedule's zone, in UTC when that differs, and relative to now."""
    if ms is None:
        return "-"
    text = clock(ms, zone)
    if zone != "UTC":
        utc = datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S UTC")
        text += f" ({utc})"
    return f"{text}  {relative(ms, now_ms)}"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = [c.ljust(w) for c, w in zip(row[:-1], widths[:-1], strict=True)]
        lines.append("  ".join([*padded, row[-1]]).rstrip())
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, object]]) -> str:
    """``name:  value`` lines with the values aligned."""
    width = max((len(k) for k, _ in pairs), default=0) + 1
    return "\n".join(f"{(k + ':').ljust(width)}  {'-' if v is None else v}" for k, v in pairs)


def task_text(s: Schedule) -> str:
    """What a schedule's job runs: its task, or an HTTP target's method and URL."""
    return display(s.http) if s.http is not None else s.task


def trigger_text(s: Schedule) -> str:
    if s.cron is not None:
        return f"cron {s.cron}"
    if s.every is not None:
        return f"every {duration(s.every * 1000)}"
    return f"at {clock(to_ms(s.at), s.timezone)}" if s.at else "-"


def dst_text(s: Schedule) -> str | None:
    """A cron schedule's DST rule in one phrase (``rsched show``, the dashboard): ``gap skip,
    fold first (cron's rule)``, each field left unset marked as cron's rule for its expression;
    None for ``every`` and ``at``, which no clock change moves."""
    if s.cron is None:
        return None
    fixed = Cron.parse(s.cron).fixed
    gap = s.dst_gap or f"{'shift' if fixed else 'skip'} (cron's rule)"
    fold = s.dst_fold or f"{'first' if fixed else 'both'} (cron's rule)"
    return f"gap {gap}, fold {fold}"


def status_text(s: Schedule) -> str:
    return "completed" if s.completed else "paused" if s.paused else "active"


def concurrency_text(concurrency: int | None) -> str:
    """A limit's concurrency as a table shows it: ``3``, ``0 (paused)``, ``-`` (no cap)."""
    if concurrency is None:
        return "-"
    return "0 (paused)" if concurrency == 0 else str(concurrency)


def override_text(override: Mapping[str, Any] | None) -> str:
    """An operator's numbers for a limit key (``{"c": n, "r": [count, ms]}``, as
    ``LimitInfo.override`` holds them): ``concurrency 0 (paused), rate 100/m``; ``-`` for none."""
    if not override:
        return "-"
    parts = []
    if isinstance(override.get("c"), int):
        parts.append(f"concurrency {concurrency_text(override['c'])}")
    r = override.get("r")
    if isinstance(r, list) and len(r) == 2 and all(isinstance(n, int) and n > 0 for n in r):
        parts.append(f"rate {Rate(r[0], r[1] / 1000)}")
    return ", ".join(parts) or "-"


def limit_text(limit: Limit) -> str:
    """A declared limit in the ``--limit`` syntax of the command line (``rsched show``, the
    dashboard): ``customer:{customer_id},concurrency=1``, ``crm,rate=100/m``."""
    text = limit.key
    if limit.concurrency is not None:
        text += f",concurrency={limit.concurrency}"
    if limit.rate is not None:
        text += f",rate={limit.rate}"
    return text
