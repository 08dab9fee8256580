"""The operator's snapshot of a deployment (:meth:`Client.stats`): schedules by status, the due
backlog, queues, dead letters and the lease of every partition, summed over the partitions.

The records are TypedDicts from ``typing_extensions``: pydantic (the HTTP API's response model)
reads only those on Python 3.11.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, cast

from typing_extensions import TypedDict

from rsched._store.leases import LeaseStore
from rsched._store.partitions import Partitions, at_once, merge_queue_stats
from rsched._store.queues import QueueStore
from rsched._store.schedules import IndexStats, ScheduleStore


class ScheduleCounts(TypedDict):
    """Schedules by status."""

    total: int
    active: int
    paused: int
    completed: int


class Overdue(TypedDict):
    """The most overdue schedule: its next run (epoch ms) and how late it is."""

    id: str
    next_run_ms: int
    late_ms: int


class Lease(TypedDict):
    """A partition's lease: its holder, fencing token, time since its last renewal and what is
    left of it."""

    owner: str
    token: int | str
    lease_left_ms: int
    lease_age_ms: int


class QueueStats(TypedDict, total=False):
    """One queue over every partition: waiting (``length``, of which ``high`` and ``low``),
    taken and not yet acked (``pending``), ``delayed``, ``dead``, the live ``workers`` reading
    it, the names in its consumer group (``consumers``) and the age of its oldest pending job."""

    length: int
    high: int
    low: int
    pending: int
    delayed: int
    dead: int
    workers: int
    consumers: int
    oldest_pending_ms: int | None


class SchedulerInfo(TypedDict):
    """A scheduler on the membership list: ``leader`` when it leads a partition (``partitions``
    lists them), else ``standby``; the time since its last beat (it beats every few seconds:
    a large age is a scheduler that stopped without leaving)."""

    id: str
    role: str
    partitions: list[int]
    beat_age_ms: int


@dataclass(frozen=True, slots=True)
class Stats:
    """A snapshot of one rsched deployment (see :meth:`Client.stats`). Times are epoch ms."""

    now_ms: int
    schedules: ScheduleCounts
    due: int
    oldest_overdue: Overdue | None
    queues: dict[str, QueueStats]
    dead_letters: int
    leader: Lease | None
    #: The deployment's number of partitions, and the lease of each (None: no leader); ``leader``
    #: is partition 0's.
    partitions: int = 1
    leaders: list[Lease | None] = field(default_factory=list)
    #: Every scheduler on the membership list, leaders first (``{prefix}:schedulers``).
    schedulers: list[SchedulerInfo] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


async def read_stats(
    parts: Partitions, clock: ScheduleStore, registry: QueueStore, lease_ttl_ms: int
) -> Stats:
    """The deployment's stats now (by Redis TIME, read through ``clock``); ``lease_ttl_ms`` is
    the lease's TTL where a leader stored none beside its lease."""
    now = await clock.time_ms()
    # The reads at once, their round trips overlapping (one after another, they were nine).
    indexes, per_partition, live, members = await at_once(
        parts.each(lambda k: parts.schedules[k].index_stats(now)),
        parts.each(lambda k: parts.queues[k].queue_stats()),
        registry.workers(),
        LeaseStore(clock.redis, parts.keys).members(),
    )
    oldest = min(
        (i.oldest for i in indexes if i.oldest is not None), key=lambda o: o[1], default=None
    )
    oldest_overdue: Overdue | None = None
    if oldest is not None:
        sid, score = oldest
        oldest_overdue = {"id": sid, "next_run_ms": score, "late_ms": now - score}
    leaders = [_lease(index, lease_ttl_ms) for index in indexes]
    queues = cast(dict[str, QueueStats], merge_queue_stats(per_partition))
    for name, q in queues.items():
        q["workers"] = sum(name in w.queues for w in live)
    total = sum(i.total for i in indexes)
    active = sum(i.active for i in indexes)
    paused = sum(i.paused for i in indexes)
    return Stats(
        now_ms=now,
        schedules={
            "total": total,
            "active": active,
            "paused": paused,
            "completed": total - active - paused,
        },
        due=sum(i.due for i in indexes),
        oldest_overdue=oldest_overdue,
        queues=queues,
        dead_letters=sum(int(q.get("dead", 0) or 0) for q in queues.values()),
        leader=leaders[0],
        partitions=parts.count,
        leaders=leaders,
        schedulers=_schedulers(members, leaders, now),
    )


def _schedulers(
    members: list[tuple[str, int]], leaders: list[Lease | None], now: int
) -> list[SchedulerInfo]:
    """The membership list with what each leads; a lease holder missing from the list (an
    older scheduler that does not beat) is listed too."""
    led: dict[str, list[int]] = {}
    for k, lease in enumerate(leaders):
        if lease is not None:
            led.setdefault(lease["owner"], []).append(k)
    beats = dict(members)
    ids = [*beats, *(owner for owner in led if owner not in beats)]
    out: list[SchedulerInfo] = [
        {
            "id": sid,
            "role": "leader" if sid in led else "standby",
            "partitions": led.get(sid, []),
            "beat_age_ms": max(0, now - beats[sid]) if sid in beats else -1,
        }
        for sid in ids
    ]
    out.sort(key=lambda s: (s["role"] != "leader", s["beat_age_ms"] < 0, s["beat_age_ms"]))
    return out


def _lease(index: IndexStats, lease_ttl_ms: int) -> Lease | None:
    if index.leader is None:
        return None
    token, _, owner = index.leader.partition(":")
    ttl = index.lease_ttl_ms or lease_ttl_ms
    return {
        "owner": owner,
        "token": int(token) if token.isdigit() else token,
        "lease_left_ms": index.lease_left_ms,
        "lease_age_ms": max(0, ttl - index.lease_left_ms),
    }
