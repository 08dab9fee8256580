"""Health as a model, with no I/O: the records of a schedule's and a deployment's health, the
thresholds of the checks, and the classification of one schedule from what Redis holds about it
(:class:`Facts`), by a given Redis time. ``rsched._ops.health`` reads those facts, in bounded reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from rsched._core.humanize import duration
from rsched._core.job import DEFAULT_TIMEOUT_S
from rsched._core.settings import HealthSettings

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
UNHEALTHY = ("late", "stuck", "failing")
STATES = ("ok", *UNHEALTHY, "paused", "completed")
# A run's outcome events: whether it succeeded (a cancelled run did not fail).
_FINISHED = {
    "completed": True,
    "cancelled": True,
    "failed": False,
    "timed_out": False,
    "dead": False,
}
DEFAULT_GRACE_S = 60.0


def to_datetime(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


@dataclass(frozen=True, slots=True)
class ScheduleHealth:
    """A schedule's health (see :meth:`rsched.Client.health`).

    ``state`` is ``ok``, ``late`` (due and not fired past its misfire grace), ``stuck`` (its run
    has been running past its timeout), ``failing`` (its last ``health.failing_runs`` runs
    failed or died), ``paused`` or ``completed``; ``reason`` says why in words; ``since`` is
    the missed run (late), the run's start (stuck) or the last failure (failing).
    """

    id: str
    state: str
    reason: str = ""
    since: datetime | None = None

    @property
    def healthy(self) -> bool:
        return self.state not in UNHEALTHY

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "reason": self.reason,
            "since": self.since.isoformat() if self.since else None,
        }


@dataclass(frozen=True, slots=True)
class HealthProblem:
    """One failed check of :meth:`rsched.Client.health`: ``check`` is ``no_leader``,
    ``due_backlog``, ``overdue``, ``no_worker``, ``stalled``, ``dead_letters`` or
    ``schedules``; ``message`` says what is wrong."""

    check: str
    message: str


@dataclass(frozen=True, slots=True)
class Health:
    """A deployment's health (see :meth:`rsched.Client.health`).

    ``ok`` is true when no check failed; ``problems`` lists the failed checks; ``schedules``
    the unhealthy schedules (late, stuck, failing) found by the bounded reads docs/health.md
    describes, ``truncated`` telling that more late schedules exist than were read.
    ``leader`` is the lease owner or None (of partition 0; ``leaders`` has each partition's),
    ``due`` how many schedules are due now and ``oldest_overdue_ms`` how late the most overdue
    one is.
    """

    ok: bool
    checked_at: datetime
    problems: list[HealthProblem]
    schedules: list[ScheduleHealth]
    truncated: bool = False
    leader: str | None = None
    due: int = 0
    oldest_overdue_ms: int | None = None
    leaders: list[str | None] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checked_at": self.checked_at.isoformat(),
            "problems": [{"check": p.check, "message": p.message} for p in self.problems],
            "schedules": [s.as_dict() for s in self.schedules],
            "truncated": self.truncated,
            "leader": self.leader,
            "due": self.due,
            "oldest_overdue_ms": self.oldest_overdue_ms,
            "leaders": self.leaders,
        }


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The limits of the deployment checks (``health.*`` settings unless given)."""

    max_due: int
    max_overdue_s: float
    dead_letter_window_s: float

    @classmethod
    def of(cls, cfg: HealthSettings, **given: float | None) -> Thresholds:
        values = {
            "max_due": cfg.max_due,
            "max_overdue_s": cfg.max_overdue_s,
            "dead_letter_window_s": cfg.dead_letter_window_s,
        }
        values.update({k: v for k, v in given.items() if v is not None})
        return cls(int(values["max_due"]), values["max_overdue_s"], values["dead_letter_window_s"])


@dataclass
class Facts:
    """What Redis holds about one schedule, as far as its health goes."""

    exists: bool
    status: str = ""
    score: float | None = None
    grace_s: float = DEFAULT_GRACE_S
    run: str = ""
    run_state: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    history: list[dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def late_by_ms(facts: Facts, now_ms: int) -> int | None:
    """How late the schedule is past its misfire grace's start, or None when it is not late."""
    score = facts.score
    if score is None or not math.isfinite(score):
        return None
    late_ms = now_ms - int(score)
    return late_ms if late_ms > facts.grace_s * 1000 else None


def decided(facts: Facts, now_ms: int) -> bool:
    """Whether the state is known without the history (paused, completed or late)."""
    return facts.status in ("paused", "completed") or late_by_ms(facts, now_ms) is not None


def classify(
    sid: str, facts: Facts, now_ms: int, failing_runs: int, stuck_grace_s: float
) -> ScheduleHealth:
    """The state of one schedule: late before stuck before failing (the first that applies)."""
    if facts.status in ("paused", "completed"):
        return ScheduleHealth(sid, facts.status)
    late_ms = late_by_ms(facts, now_ms)
    if late_ms is not None:
        return ScheduleHealth(
            sid,
            "late",
            f"due {duration(late_ms)} ago and not fired "
            f"(misfire grace {duration(facts.grace_s * 1000)}); is a scheduler running?",
            to_datetime(now_ms - late_ms),
        )
    history = facts.history or []
    if facts.run and facts.run_state == "running":
        started = next(
            (
                ev.get("at")
                for ev in history
                if ev.get("event") == "running" and ev.get("execution_id") == facts.run
            ),
            None,
        )
        if isinstance(started, int):
            running_ms = now_ms - started
            if running_ms > (facts.timeout_s + stuck_grace_s) * 1000:
                return ScheduleHealth(
                    sid,
                    "stuck",
                    f"run {facts.run} running for {duration(running_ms)}, past its timeout "
                    f"of {duration(facts.timeout_s * 1000)}",
                    to_datetime(started),
                )
    outcomes = last_outcomes(history, failing_runs)
    if len(outcomes) >= failing_runs and not any(ok for ok, _ in outcomes):
        last = outcomes[0][1]
        error = last.get("error") or last.get("reason") or last.get("error_type") or ""
        at = last.get("at")
        return ScheduleHealth(
            sid,
            "failing",
            f"last {failing_runs} runs failed or died" + (f" (last: {error})" if error else ""),
            to_datetime(at) if isinstance(at, int) else None,
        )
    return ScheduleHealth(sid, "ok")


def last_outcomes(history: Iterable[dict[str, Any]], n: int) -> list[tuple[bool, dict[str, Any]]]:
    """(succeeded, event) of the newest outcome of each of the last ``n`` runs that have one,
    newest first. A run that failed and waits for its retry counts as failed until it ends."""
    seen: set[str] = set()
    out: list[tuple[bool, dict[str, Any]]] = []
    for ev in history:
        kind, exec_id = ev.get("event"), ev.get("execution_id")
        if kind not in _FINISHED or not isinstance(exec_id, str) or exec_id in seen:
            continue
        seen.add(exec_id)
        out.append((_FINISHED[str(kind)], ev))
        if len(out) == n:
            break
    return out


def as_float(value: object, default: float) -> float:
    try:
        result = float(str(value))
    except ValueError:
        return default
    return result if math.isfinite(result) else default


def timeout_of(opts: object) -> float:
    if not opts:
        return DEFAULT_TIMEOUT_S
    try:
        data = orjson.loads(str(opts))
    except orjson.JSONDecodeError:
        return DEFAULT_TIMEOUT_S
    value = data.get("timeout_s") if isinstance(data, dict) else None
    return as_float(value, DEFAULT_TIMEOUT_S) if value is not None else DEFAULT_TIMEOUT_S
