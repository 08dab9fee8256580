"""Health: each schedule's state (ok, late, failing, stuck, paused, completed) and the checks of
a deployment, computed from what Redis holds, by Redis TIME, with bounded reads.

No scheduler needs to run for any of it: a schedule whose scheduler died is late because its
score in the index lies in the past, which one ``ZRANGEBYSCORE`` finds. Which schedules one
check looks at (so that its cost does not grow with the number of schedules):

- late: the oldest ``health.max_schedules`` entries of the index due before now;
- failing: the schedules of the newest ``health.dead_scan`` dead letters of each queue (a run
  that fails for good leaves one); their history says whether the last ``failing_runs`` runs
  failed or died;
- stuck: the schedules of the oldest ``health.pending_scan`` pending entries of each queue
  (a running job is a pending entry); the run marker says whether it is running, the history's
  ``running`` event since when;
- and any ids the caller adds (the health watch adds those it announced unhealthy, so it sees
  them recover).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rsched._core.health import (
    DEFAULT_GRACE_S,
    UNHEALTHY,
    Facts,
    Health,
    HealthProblem,
    ScheduleHealth,
    Thresholds,
    as_float,
    classify,
    decided,
    late_by_ms,
    timeout_of,
    to_datetime,
)
from rsched._core.history import stored_events
from rsched._core.humanize import duration
from rsched._core.keys import GROUP, Keys
from rsched._core.rules import NAME_RE, PRIORITIES
from rsched._core.settings import Settings
from rsched._redis.scripts import server_time_ms
from rsched._store import parking
from rsched._store.firing import FiringStore
from rsched._store.partitions import at_once, gather
from rsched._store.queues import QueueStore
from rsched._store.schedules import ScheduleStore

# Schedules read per round trip.
_CHUNK = 500
# The hash fields a schedule's health is decided from ("version" first: a hash without it is
# not one rsched wrote).
_FACT_FIELDS = ("version", "status", "misfire_grace_s", "run", "run_state", "opts")


async def announced_counts(redis: Redis, keys: Keys) -> dict[str, int]:
    """How many schedules the leader's health watch last found in each unhealthy state (late,
    stuck, failing): the states it announced and keeps in ``{p}:health``."""
    counts = dict.fromkeys(UNHEALTHY, 0)
    for state in await redis.hvals(keys.health):
        if state in counts:
            counts[state] += 1
    return counts


#: At most this many orphaned jobs are counted per queue stream (the message says "N+").
ORPHANS_SHOWN = 100


@dataclass(frozen=True, slots=True)
class _Found:
    """What the checks read in one partition (HealthReader.partition_facts)."""

    owner: str | None
    due: int
    oldest: tuple[str, float] | None  # the most overdue schedule and its score
    queues: dict[str, tuple[int, int, int | None]]  # length, orphans, newest dead letter (ms)
    schedules: list[ScheduleHealth]
    truncated: bool


class HealthReader:
    """The reads behind :meth:`rsched.Client.health`, ``rsched monitor`` and ``rsched health``
    and the scheduler's health watch, in one partition (``keys``; the only one when None)."""

    def __init__(self, redis: Redis, settings: Settings, keys: Keys | None = None) -> None:
        self.redis = redis
        self.settings = settings
        self.cfg = settings.health
        self.keys = keys or Keys(settings.prefix)
        self._queues = QueueStore.from_settings(redis, settings, self.keys)
        self._schedules = ScheduleStore.from_settings(redis, settings, self.keys)
        self._firing = FiringStore.from_settings(redis, settings, self.keys)

    async def now_ms(self) -> int:
        return await server_time_ms(self.redis, self.keys)

    # --- schedules -----------------------------------------------------------------------------

    async def schedules(
        self,
        now_ms: int,
        extra: Iterable[str] = (),
        dead_cursors: dict[str, str] | None = None,
    ) -> tuple[list[ScheduleHealth], bool]:
        """(every schedule found unhealthy, whether more late ones exist than were read), plus
        the state of each id in ``extra`` whatever it is (so a caller sees it recover).

        ``dead_cursors`` (queue -> dead letter id, updated here) makes the failing candidates
        those of the dead letters added since the last call (see :meth:`failing_candidates`).
        """
        late, truncated = await self.late_candidates(now_ms)
        wanted = list(extra)
        failing, stuck = await at_once(
            self.failing_candidates(dead_cursors), self.stuck_candidates()
        )
        others = [*failing, *stuck, *wanted]
        ids = dict.fromkeys(sid for sid, _ in late)
        for sid in others:
            ids.setdefault(sid)
        # A due schedule that is neither late nor a candidate is ok as far as this check goes:
        # its history is not read (a herd puts thousands in the due range for a moment).
        found = await self.classify(list(ids), now_ms, history_of=set(others), scores=dict(late))
        keep = set(wanted)
        return [h for h in found if not h.healthy or h.id in keep], truncated

    async def late_candidates(self, now_ms: int) -> tuple[list[tuple[str, float]], bool]:
        """(id, next run) of the schedules due before now, oldest first (at most
        ``max_schedules``); paused and completed ones sit at +inf and are never among them."""
        limit = self.cfg.max_schedules
        # The scheduler's due read (lua/due.lua): a herd's entries, which share a score, come
        # as one string to split rather than a reply element each (hundreds of ms of parsing
        # in Python while a herd fires). Due by the server's clock as it reads, ms after now_ms:
        # an entry due in between is not late anyway.
        # Parked ones are due only when no scheduler brought them back (rsched._store.parking).
        (_, found, _), parked = await at_once(
            self._firing.due(limit + 1, reader=True),
            parking.due_ids(self.redis, self.keys, now_ms, limit + 1),
        )
        entries = sorted(
            [(float(score), sid) for sid, score in found] + [(s, m) for m, s in parked]
        )
        return [(sid, score) for score, sid in entries[:limit]], len(entries) > limit

    async def failing_candidates(self, cursors: dict[str, str] | None = None) -> list[str]:
        """Schedules of the newest dead letters of each queue; with ``cursors`` (queue -> the
        newest dead letter id seen, updated here), of those added since (at most
        ``dead_scan`` a queue): a watcher that checks often then reads each dead letter once."""
        out: dict[str, None] = {}
        queues = await self._queue_names()
        async with self.redis.pipeline(transaction=False) as pipe:
            for queue in queues:
                key, seen = self.keys.dead(queue), (cursors or {}).get(queue)
                if seen is None:
                    pipe.xrevrange(key, count=self.cfg.dead_scan)
                else:
                    pipe.xrange(key, min=f"({seen}", count=self.cfg.dead_scan)
            replies = await pipe.execute(raise_on_error=False)
        for queue, raw in zip(queues, replies, strict=True):
            if isinstance(raw, Exception):
                continue  # a key of another type: not rsched's
            entries = cast(list[tuple[str, dict[str, str]]], raw)
            if cursors is not None and entries:
                cursors[queue] = max((str(i) for i, _ in entries), key=_stream_id)
            for _, fields in entries:
                sid = str(fields.get("schedule_id") or "")
                if sid:
                    out.setdefault(sid)
        return list(out)

    async def stuck_candidates(self) -> list[str]:
        """Schedules of the oldest pending (delivered, not yet acknowledged) entries of each
        queue's streams (one per priority level)."""
        streams = [
            self.keys.queue(q, level) for q in await self._queue_names() for level in PRIORITIES
        ]
        found = await gather([functools.partial(self._pending_schedules, key) for key in streams])
        return list(dict.fromkeys(sid for some in found for sid in some))

    async def _pending_schedules(self, key: str) -> list[str]:
        try:
            pending = await self.redis.xpending_range(
                key, GROUP, min="-", max="+", count=self.cfg.pending_scan
            )
        except ResponseError:
            return []  # no stream or no group yet
        if not pending:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for p in pending:
                pipe.xrange(key, p["message_id"], p["message_id"])
            found = await pipe.execute(raise_on_error=False)
        out = []
        for entries in found:
            if isinstance(entries, Exception) or not entries:
                continue
            sid = str(entries[0][1].get("schedule_id") or "")
            if sid:
                out.append(sid)
        return out

    async def classify(
        self,
        ids: Sequence[str],
        now_ms: int,
        history_of: set[str] | None = None,
        scores: Mapping[str, float] | None = None,
    ) -> list[ScheduleHealth]:
        """The health of each id that names an existing schedule, in the order given. Only the
        ids in ``history_of`` (all when None) can turn out stuck or failing; the others are
        left out when they are ok (a herd's due within their grace). ``scores``: the next runs
        already read (the late candidates'), read again only for those they make late."""
        ids = [sid for sid in ids if NAME_RE.match(sid)]
        facts: dict[str, Facts] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            facts.update(await self._facts(chunk, now_ms, history_of, scores or {}))
        out = []
        for sid in ids:
            f = facts.get(sid)
            if f is not None and f.exists:
                out.append(classify(sid, f, now_ms, self.cfg.failing_runs, self.cfg.stuck_grace_s))
        return out

    async def _facts(
        self,
        ids: Sequence[str],
        now_ms: int,
        history_of: set[str] | None,
        scores: Mapping[str, float],
    ) -> dict[str, Facts]:
        """Each schedule's fields (one script call and one JSON reply: a herd's due range
        puts hundreds here, and a reply element each, parsed in Python, took health
        hundreds of ms) and next run (``scores``, or read), then the history (~0.3 KB each),
        only of those neither late, paused nor completed already."""
        k = self.keys
        out: dict[str, Facts] = {}
        for sid, fields in zip(
            ids, await self._schedules.some_fields(ids, _FACT_FIELDS), strict=True
        ):
            if not fields or "version" not in fields:
                continue  # gone, or not a hash rsched wrote
            grace = fields.get("misfire_grace_s")
            facts = Facts(
                exists=True,
                status=fields.get("status", ""),
                score=scores.get(sid),
                grace_s=as_float(grace, DEFAULT_GRACE_S) if grace is not None else DEFAULT_GRACE_S,
                run=fields.get("run", ""),
                run_state=fields.get("run_state", ""),
                timeout_s=timeout_of(fields.get("opts")),
            )
            if (
                history_of is not None
                and sid not in history_of
                and facts.score is not None
                and not decided(facts, now_ms)
            ):
                continue  # ok: due within its grace (a herd's), and no candidate of another state
            out[sid] = facts
        # The next run of the others, and again of those a score read before makes late (it may
        # have fired since): in the index, or in its parked bucket.
        unread = [
            sid for sid, f in out.items() if f.score is None or late_by_ms(f, now_ms) is not None
        ]
        if unread:
            # One reply for the index (a thousand late schedules were two thousand replies
            # parsed in Python); a bucket's only for those not in it.
            found = dict(zip(unread, await self.redis.zmscore(k.schedules, unread), strict=True))
            parked = [sid for sid, score in found.items() if score is None]
            if parked:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for sid in parked:
                        pipe.zscore(k.parked_of(sid), sid)
                    found.update(zip(parked, await pipe.execute(raise_on_error=False), strict=True))
            for sid, score in found.items():
                out[sid].score = score if isinstance(score, float) else None
        undecided = [
            sid
            for sid, f in out.items()
            if not decided(f, now_ms) and (history_of is None or sid in history_of)
        ]
        if undecided:
            async with self.redis.pipeline(transaction=False) as pipe:
                for sid in undecided:
                    pipe.lrange(k.history(sid), 0, -1)
                histories = await pipe.execute(raise_on_error=False)
            for sid, history in zip(undecided, histories, strict=True):
                if isinstance(history, list):  # (else an error: a key of another type)
                    events = stored_events(history, sid)
                    out[sid].history = [e for e in events if isinstance(e, dict)]
        return out

    # --- the deployment ------------------------------------------------------------------------

    async def _queue_names(self) -> list[str]:
        return sorted(str(q) for q in await self.redis.smembers(self.keys.queues))

    async def live_workers(self) -> dict[str, int]:
        """How many live workers read each queue: those in the worker registry whose record has
        not expired (they heartbeat every ``heartbeat_s``). The one place that decides what a
        live worker is."""
        counts: dict[str, int] = {}
        for worker in await self._queues.workers():
            for queue in worker.queues:
                counts[queue] = counts.get(queue, 0) + 1
        return counts

    async def check(self, thresholds: Thresholds) -> Health:
        """Every deployment check and the unhealthy schedules, at one Redis time."""
        return await check_deployment([self], thresholds)

    async def partition_facts(self, now_ms: int) -> _Found:
        """What the checks need of this partition: its lease, due schedules, queues and
        unhealthy schedules."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(k.leader)
            pipe.zcount(k.schedules, "-inf", f"({now_ms}")
            pipe.zrangebyscore(k.schedules, "-inf", f"({now_ms}", start=0, num=1, withscores=True)
            leader, due, oldest = await pipe.execute()
        first = (str(oldest[0][0]), float(oldest[0][1])) if oldest else None
        # The three reads at once, their round trips overlapping: one after another, a health
        # check made some twenty, each waiting for the server and the process in turn (on a
        # busy machine, a few ms each).
        parked, (schedules, truncated), queues = await at_once(
            parking.due(self.redis, self.keys, now_ms - 1),
            self.schedules(now_ms),
            self._queue_facts(),
        )
        parked_due, parked_oldest = parked
        return _Found(
            owner=str(leader).partition(":")[2] if leader else None,
            due=int(due) + parked_due,
            oldest=parking.earliest(first, parked_oldest),
            queues=queues,
            schedules=schedules,
            truncated=truncated,
        )

    async def _queue_facts(self) -> dict[str, tuple[int, int, int | None]]:
        """Per queue: jobs waiting or running, orphaned jobs (at most ORPHANS_SHOWN a stream)
        and the time (ms) of its newest dead letter."""
        queues = await self._queue_names()
        idle = orphan_ms(self.settings)
        # One round trip for every queue: per level its length and orphans, then its newest
        # dead letter (an error in place: no stream or group yet, or a key not rsched's).
        async with self.redis.pipeline(transaction=False) as pipe:
            for queue in queues:
                for level in PRIORITIES:
                    stream = self.keys.queue(queue, level)
                    pipe.xlen(stream)
                    pipe.xpending_range(stream, GROUP, "-", "+", ORPHANS_SHOWN, idle=idle)
                pipe.xrevrange(self.keys.dead(queue), count=1)
            replies = iter(await pipe.execute(raise_on_error=False))
        out: dict[str, tuple[int, int, int | None]] = {}
        for queue in queues:
            length, orphans, newest_ms = 0, 0, None
            for _ in PRIORITIES:
                size, pending = next(replies), next(replies)
                if not isinstance(size, Exception):
                    length += int(size)
                    if not isinstance(pending, Exception):
                        orphans += len(pending)
            newest = next(replies)
            if newest and not isinstance(newest, Exception):
                newest_ms = int(str(newest[0][0]).split("-")[0])
            out[queue] = (length, orphans, newest_ms)
        return out


def orphan_ms(settings: Settings) -> int:
    """How long a taken job's entry may stay idle before it counts as orphaned.

    Running jobs heartbeat (their entries' idle time restarts every heartbeat_s) and other
    workers reclaim an entry idle past the visibility timeout: one idle twice that long was
    taken by a worker that is gone, and no worker reclaims it."""
    return math.ceil(settings.worker.visibility_timeout_s * 2000)


async def check_deployment(readers: Sequence[HealthReader], thresholds: Thresholds) -> Health:
    """Every deployment check over the partitions of ``readers`` (all read at once, at one
    Redis time) and the unhealthy schedules of all of them."""
    first = readers[0]
    now = await first.now_ms()
    live, found = await at_once(
        first.live_workers(), gather([functools.partial(r.partition_facts, now) for r in readers])
    )
    problems: list[HealthProblem] = []
    owners = [f.owner for f in found]
    lost = [str(k) for k, owner in enumerate(owners) if owner is None]
    if len(readers) == 1 and lost:
        problems.append(HealthProblem("no_leader", "no scheduler holds the lease"))
    elif lost:
        problems.append(
            HealthProblem(
                "no_leader",
                f"no scheduler holds the lease of partition(s) {', '.join(lost)} "
                f"(of {len(readers)})",
            )
        )
    due = sum(f.due for f in found)
    if due > thresholds.max_due:
        problems.append(
            HealthProblem("due_backlog", f"{due} schedules due (limit {thresholds.max_due})")
        )
    oldest = min((f.oldest for f in found if f.oldest), key=lambda o: o[1], default=None)
    overdue = now - int(oldest[1]) if oldest and math.isfinite(oldest[1]) else None
    if oldest is not None and overdue is not None and overdue > thresholds.max_overdue_s * 1000:
        problems.append(
            HealthProblem(
                "overdue",
                f"{oldest[0]} is {duration(overdue)} overdue "
                f"(limit {duration(thresholds.max_overdue_s * 1000)})",
            )
        )
    problems += _queue_problems([f.queues for f in found], now, thresholds, live, first.settings)
    schedules = [s for f in found for s in f.schedules]
    truncated = any(f.truncated for f in found)
    stuck = [s for s in schedules if s.state == "stuck"]
    if stuck:
        problems.append(
            HealthProblem(
                "stalled",
                f"{len(stuck)} run(s) past their timeout: " + ", ".join(s.id for s in stuck[:5]),
            )
        )
    if schedules:
        counts = {state: sum(s.state == state for s in schedules) for state in UNHEALTHY}
        words = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
        more = " (and more late ones not read)" if truncated else ""
        problems.append(HealthProblem("schedules", f"unhealthy schedules: {words}{more}"))
    return Health(
        ok=not problems,
        checked_at=to_datetime(now),
        problems=problems,
        schedules=schedules,
        truncated=truncated,
        leader=owners[0],
        due=due,
        oldest_overdue_ms=overdue,
        leaders=owners,
    )


def _queue_problems(
    found: Sequence[dict[str, tuple[int, int, int | None]]],
    now_ms: int,
    thresholds: Thresholds,
    live: dict[str, int],
    settings: Settings,
) -> list[HealthProblem]:
    """The queue checks over every partition's queue facts, one problem per queue and check."""
    queues: dict[str, tuple[int, int, int | None]] = {}
    for part in found:
        for queue, (length, orphans, newest) in part.items():
            was_length, was_orphans, was_newest = queues.get(queue, (0, 0, None))
            if was_newest is not None and (newest is None or was_newest > newest):
                newest = was_newest
            queues[queue] = (was_length + length, was_orphans + orphans, newest)
    problems: list[HealthProblem] = []
    window_ms = thresholds.dead_letter_window_s * 1000
    for queue in sorted(queues):
        length, orphans, newest_ms = queues[queue]
        if length and not live.get(queue):
            problems.append(
                HealthProblem(
                    "no_worker", f"queue {queue} holds {length} job(s) and no live worker"
                )
            )
        if orphans:
            more = "+" if orphans >= ORPHANS_SHOWN else ""
            problems.append(
                HealthProblem(
                    "stalled",
                    f"queue {queue}: {orphans}{more} job(s) taken by a worker and without a "
                    f"heartbeat for over {duration(orphan_ms(settings))}: no worker reclaims them",
                )
            )
        if window_ms > 0 and newest_ms is not None:
            age = now_ms - newest_ms
            if age < window_ms:
                problems.append(
                    HealthProblem(
                        "dead_letters",
                        f"queue {queue}: newest dead letter {duration(max(age, 0))} old "
                        f"(window {duration(window_ms)})",
                    )
                )
    return problems


def _stream_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return (int(ms), int(seq or 0)) if ms.isdigit() and (seq or "0").isdigit() else (0, 0)
