"""Deployments of N partitions in the tests: who leads each partition, what every partition
fired, and whether each occurrence fired exactly once."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from redis.asyncio import Redis

from rsched._core.keys import Keys
from rsched._scheduler.membership import owner_of

#: The number of partitions of the tests' partitioned deployments.
N = 16


async def lease_owners(redis: Redis, prefix: str) -> list[str | None]:
    """The owner of each partition's lease (None: free)."""
    keys = Keys(prefix, N)
    values = [await redis.get(k.leader) for k in keys.every_partition()]
    return [str(v).partition(":")[2] if v else None for v in values]


async def fired(redis: Redis, prefix: str, queue: str = "default") -> list[dict[str, str]]:
    """Every job in the queue's streams of every partition."""
    out: list[dict[str, str]] = []
    for keys in Keys(prefix, N).every_partition():
        entries: Any = await redis.xrange(keys.queue(queue))
        out += [fields for _, fields in entries]
    return out


def once_each(jobs: list[dict[str, str]], every_ms: int) -> None:
    """Each occurrence of each schedule fired once: none twice, none skipped."""
    occurrences = Counter((j["schedule_id"], j["scheduled_at"]) for j in jobs)
    assert [o for o, n in occurrences.items() if n > 1] == []
    by_schedule: dict[str, list[int]] = {}
    for job in jobs:
        by_schedule.setdefault(job["schedule_id"], []).append(int(job["scheduled_at"]))
    for sid, times in by_schedule.items():
        times.sort()
        steps = {b - a for a, b in itertools.pairwise(times)}
        assert steps <= {every_ms}, f"{sid}: occurrences lost ({sorted(steps)})"


def owner_pid(owner: str | None) -> int | None:
    return int(owner.split(":")[1]) if owner else None


async def led_by(redis: Redis, prefix: str, pids: set[int]) -> bool:
    """Every partition is led, by exactly the scheduler processes ``pids``."""
    leading = [owner_pid(o) for o in await lease_owners(redis, prefix)]
    return None not in leading and set(leading) == pids


async def shared_by(redis: Redis, prefix: str, pids: set[int]) -> bool:
    """Every partition is led by its owner among the live schedulers of ``pids``, as rendezvous
    hashing gives it (rsched._scheduler.membership). Not that each leads some: the ids are
    random, and three schedulers leave one of them none of 16 partitions in ~0.5 % of runs."""
    members = await redis.zrange(Keys(prefix, N).schedulers, 0, -1)
    live = [str(m) for m in members if owner_pid(str(m)) in pids]
    if {owner_pid(sid) for sid in live} != pids:
        return False
    return await lease_owners(redis, prefix) == [owner_of(k, live) for k in range(N)]
