"""The demo's narration: each new event of the demo schedules' history, and what the handlers
say, printed once, in time order."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio
from anyio.abc import TaskStatus
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._core.history import stored_events
from rsched._core.job import Job
from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._devtools.demo.app import QUEUE

log = get_logger("rsched.demo")

POLL_S = 0.1


_out_lock = threading.Lock()


def say(text: str = "") -> None:
    with _out_lock:
        print(text, flush=True)


def _clock(ms: float | None = None) -> str:
    when = datetime.now() if ms is None else datetime.fromtimestamp(ms / 1000)
    return when.strftime("%H:%M:%S.%f")[:-3]


def hms(ms: Any) -> str:
    try:
        return datetime.fromtimestamp(int(ms) / 1000).strftime("%H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ms)


def _seconds(ms: Any) -> str:
    try:
        value = float(ms)
    except (TypeError, ValueError):
        return str(ms)
    if value < 1:
        return "<1 ms"
    if value < 10 and not value.is_integer():
        return f"{value:.1f} ms"
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:.1f} s"


# Order of events that share a millisecond; a handler's own lines (rank 1) sit in between.
_RANK = {
    "fired": 0,
    "started": 0,
    "completed": 2,
    "failed": 2,
    "retried": 2,
    "timed out": 2,
    "dead": 3,
    "skipped": 2,
    "cancelled": 2,
}

_DEAD_REASONS = {
    "max_retries": "retries exhausted",
    "poison": "delivered too many times",
    "unknown_task": "no handler for this task",
    "malformed": "not a valid job",
    "timeout": "timed out",
    "not_retryable": "failed for good",
}


def describe(event: dict[str, Any], dead_stream: str = "the dead-letter stream") -> tuple[str, str]:
    """(label, detail) of one history event, for a human."""
    kind = str(event.get("event", "?"))
    attempt = event.get("attempt")
    error = ": ".join(
        str(event[k]) for k in ("error_type", "error_message", "error") if event.get(k)
    )
    if kind == "fired":
        origin = event.get("origin", "schedule")
        how = "" if origin == "schedule" else f" ({origin})"
        missed = f", standing for {event['missed']} missed" if event.get("missed") else ""
        late = _seconds(event.get("late_ms", 0))
        return "fired", f"occurrence {hms(event.get('scheduled_at'))}{how}, {late} late{missed}"
    if kind == "running":
        again = event.get("deliveries", 1)
        extra = f", delivery {again} (taken over from a lost worker)" if again != 1 else ""
        return "started", f"attempt {attempt}{extra}"
    if kind == "completed":
        took = event.get("duration_ms")
        return "completed", f"attempt {attempt}" + (
            f" in {_seconds(took)}" if took is not None else ""
        )
    if kind in ("failed", "timed_out"):
        retry = event.get("retry_in_ms")
        nxt = f" -> retry in {_seconds(retry)}" if retry is not None else ""
        what = "timed out" if kind == "timed_out" else (error or "failed")
        return "failed" if kind == "failed" else "timed out", f"attempt {attempt}: {what}{nxt}"
    if kind == "retried":  # the handler raised rsched.Retry: not a failure
        retry = event.get("retry_in_ms")
        why = f" ({event['reason']})" if event.get("reason") else ""
        nxt = f" -> again in {_seconds(retry)}" if retry is not None else ""
        return "retried", f"attempt {attempt}: asked for another attempt{why}{nxt}"
    if kind == "dead":
        reason = str(event.get("reason", ""))
        why = _DEAD_REASONS.get(reason, reason)
        return "dead", f"attempt {attempt}: {error or why} -> {dead_stream} ({why})"
    if kind == "skipped":
        return "skipped", f"occurrence {hms(event.get('scheduled_at'))}: {event.get('reason')}"
    rest = {k: v for k, v in event.items() if k not in ("event", "execution_id", "at")}
    return kind, " ".join(f"{k}={v}" for k, v in rest.items())


@dataclass
class Narrator:
    """Polls the demo schedules' history lists and prints each new event once, in time order,
    together with what handlers said (:meth:`note`)."""

    redis: Redis
    keys: Keys
    schedule_ids: list[str]
    queue: str = QUEUE
    counts: dict[str, int] = field(default_factory=dict)
    _seen: dict[str, set[tuple[Any, ...]]] = field(default_factory=dict)
    _notes: list[tuple[int, str, str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, job: Job, label: str, text: str) -> None:
        """A handler's line; printed in time order with the next events (thread-safe)."""
        with self._lock:
            self._notes.append((int(time.time() * 1000), job.schedule_id or job.task, label, text))

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                await self.poll()
            except (RedisError, OSError) as exc:
                log.warning("demo.poll_failed", error=str(exc))
            await anyio.sleep(POLL_S)

    async def _fetch(self) -> list[tuple[int, str, dict[str, Any]]]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for sid in self.schedule_ids:
                pipe.lrange(self.keys.history(sid), 0, 49)
            lists: list[list[str]] = await pipe.execute()
        fresh: list[tuple[int, str, dict[str, Any]]] = []
        for sid, items in zip(self.schedule_ids, lists, strict=True):
            # A run's record grows as the run goes on: an event is new when the last read did
            # not have it.
            seen = self._seen.get(sid, set())
            events = [e for e in stored_events(items, sid) if isinstance(e, dict) and "at" in e]
            keys = [(e["at"], e["event"], e.get("execution_id"), e.get("attempt")) for e in events]
            self._seen[sid] = set(keys)
            for key, event in reversed(list(zip(keys, events, strict=True))):
                if key not in seen:
                    fresh.append((int(event.get("at") or 0), sid, event))
        return fresh

    async def skip_existing(self) -> None:
        """Take what is already recorded (an earlier run's history) as seen."""
        await self._fetch()

    async def poll(self) -> None:
        lines = [
            (at, sid, *describe(ev, self.keys.dead(self.queue)))
            for at, sid, ev in await self._fetch()
        ]
        with self._lock:
            lines += self._notes
            self._notes = []
        # Stable sort: events of one schedule keep their recorded order on equal times, and a
        # handler's own line goes between its start and its end.
        for at, sid, label, detail in sorted(lines, key=lambda ln: (ln[0], _RANK.get(ln[2], 1))):
            if label in _RANK:
                self.counts[label] = self.counts.get(label, 0) + 1
            say(f"{_clock(at or None)}  {label:<10} {sid:<12} {detail}")

    def summary(self) -> str:
        labels = sorted(self.counts, key=lambda x: (_RANK.get(x, 9), x))
        return ", ".join(f"{self.counts[x]} {x}" for x in labels) or "nothing happened"
