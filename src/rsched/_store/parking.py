"""Parked schedules: the far end of the schedules index, kept in small buckets.

A sorted-set entry in the index costs ~110 bytes (skiplist node, dict entry, member); in a
bucket of a hundred or so, which Redis keeps as a listpack, ~28. What is due more than
PARK_AFTER_MS from now, paused and completed schedules too, is parked: by the write that makes it
so (upsert, upsert_many, pause: lua/includes/place.lua), or by the leading scheduler for
what a fire, resume or trigger left there (lua/park.lua). The leader brings entries back
UNPARK_WITHIN_MS before they are due (lua/unpark.lua), so due reads and fires only ever look at
the index. Readers that need every schedule (a schedule's next run, list pages, counts, health,
retention) read both, here. docs/keys.md documents the keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from rsched._core.codes import Code, check
from rsched._core.keys import Keys, parked_bucket
from rsched._redis.scripts import ScriptCaller

#: Park what is due later than this from now: an hourly schedule spends 45 minutes of each
#: hour parked, a daily one nearly all day.
PARK_AFTER_MS = 15 * 60_000
#: Bring back what is due within this from now: well before it is due, so a scheduler that
#: brings back a herd of 100k (~0.3 s of Redis in bounded calls) is done long before it fires.
UNPARK_WITHIN_MS = 5 * 60_000
#: Entries a park or unpark call moves at most: ~1-2 ms of Redis (a park call writes to as many
#: buckets as it moves entries, nearly).
MOVE_LIMIT = 250
#: Buckets read per script call or pipeline by the readers below (a script call of 256 takes
#: ~1-2 ms of Redis).
READ_BUCKETS = 256
#: Buckets read per pipeline where a few will do (the retention sweep's slice).
READ_PIPELINE = 8


async def park(store: ScriptCaller, lease: str, limit: int = MOVE_LIMIT) -> int | None:
    """Park up to ``limit`` schedules due later than PARK_AFTER_MS from now; returns how many
    were parked, None when ``lease`` is no longer held."""
    k = store.keys
    now = await store.time_ms()
    ids = await store.redis.zrange(
        k.schedules, f"({now + PARK_AFTER_MS}", "+inf", byscore=True, offset=0, num=limit
    )
    if not ids:
        return 0
    groups: dict[int, list[str]] = {}
    for sid in ids:
        groups.setdefault(parked_bucket(str(sid)), []).append(str(sid))
    keys = [k.leader, k.schedules, k.parked, *(k.parked_at(n) for n in groups)]
    args = [lease, PARK_AFTER_MS, *(f"{n} {' '.join(some)}" for n, some in groups.items())]
    res = int(await store.call("park", keys, args))
    if res == Code.NOT_LEADER:
        return None
    if res < 0:
        check(res, script="park")
    return res


async def unpark(
    store: ScriptCaller, lease: str, limit: int = MOVE_LIMIT, *, everything: bool = False
) -> tuple[int, int | None] | None:
    """Bring back up to ``limit`` parked schedules due within UNPARK_WITHIN_MS (``everything``:
    whenever due, +inf included); returns (how many, the earliest next run among them), None
    when ``lease`` is no longer held."""
    k = store.keys
    now = await store.time_ms()
    top: int | str = "+inf" if everything else now + UNPARK_WITHIN_MS
    numbers = [
        str(n)
        for n in await store.redis.zrange(
            k.parked, "-inf", top, byscore=True, offset=0, num=READ_BUCKETS
        )
    ]
    if not numbers:
        return 0, None
    keys = [k.leader, k.schedules, k.parked, *(k.parked_at(n) for n in numbers)]
    within = "inf" if everything else UNPARK_WITHIN_MS
    res = await store.call("unpark", keys, [lease, within, limit, *numbers])
    if int(res[0]) == Code.NOT_LEADER:
        return None
    if int(res[0]) < 0:
        check(int(res[0]), script="unpark")
    return int(res[0]), int(float(res[1])) if res[1] else None


async def buckets(redis: Redis, k: Keys, up_to: float = math.inf) -> list[str]:
    """The keys of the parked buckets whose lower bound is at or before ``up_to``."""
    top = "+inf" if math.isinf(up_to) else int(up_to)
    return [k.parked_at(str(n)) for n in await redis.zrange(k.parked, "-inf", top, byscore=True)]


async def after(
    store: ScriptCaller, pos: tuple[float, str] | None, n: int, up_to: float = math.inf
) -> list[tuple[str, float]]:
    """Up to ``n`` parked (id, score) entries after ``pos`` in index order, from the buckets
    that may hold one at or before ``up_to`` (lua/parked_after.lua merges each group)."""
    keys = await buckets(store.redis, store.keys, up_to)
    score, member = ("-inf", "") if pos is None else (score_arg(pos[0]), pos[1])
    merged: list[tuple[float, str]] = []
    for start in range(0, len(keys), READ_BUCKETS):
        flat = await store.call_read(
            "parked_after", keys[start : start + READ_BUCKETS], [score, member, n]
        )
        merged += ((float(flat[i + 1]), str(flat[i])) for i in range(0, len(flat) - 1, 2))
    if len(keys) > READ_BUCKETS:
        merged.sort()
    return [(sid, s) for s, sid in merged[:n]]


@dataclass(slots=True)
class Counts:
    """What a partition's parked buckets hold (lua/parked_counts.lua)."""

    total: int = 0
    active: int = 0  # with a next run (not at +inf)
    due: int = 0  # due by the time asked about: none while a scheduler leads
    oldest: tuple[str, float] | None = None  # the earliest due (id, next run)
    idle: list[str] = field(default_factory=list)  # ids at +inf: paused or completed


async def counts(store: ScriptCaller, up_to_ms: int) -> Counts:
    """What the parked buckets hold, counting as due what is due at or before ``up_to_ms``."""
    keys = await buckets(store.redis, store.keys)
    out = Counts()
    for start in range(0, len(keys), READ_BUCKETS):
        got = await store.call_read("parked_counts", keys[start : start + READ_BUCKETS], [up_to_ms])
        out.total, out.active, out.due = out.total + got[0], out.active + got[1], out.due + got[2]
        if got[3]:
            out.oldest = earliest(out.oldest, (str(got[3]), float(got[4])))
        out.idle += str(got[5]).split()
    return out


async def due(redis: Redis, k: Keys, up_to_ms: int) -> tuple[int, tuple[str, float] | None]:
    """How many parked schedules are due at or before ``up_to_ms``, and the earliest (id, next
    run): none while a scheduler leads, which brings them back minutes before they are due."""
    got = await _each_bucket(
        redis,
        await buckets(redis, k, up_to_ms),
        lambda pipe, key: (
            pipe.zcount(key, "-inf", up_to_ms),
            pipe.zrange(key, "-inf", up_to_ms, byscore=True, offset=0, num=1, withscores=True),
        ),
    )
    count, oldest = 0, None
    for late, first in zip(got[::2], got[1::2], strict=True):
        if isinstance(late, int) and first:
            count += late
            oldest = earliest(oldest, (str(first[0][0]), float(first[0][1])))
    return count, oldest


async def due_ids(redis: Redis, k: Keys, before_ms: int, limit: int) -> list[tuple[str, float]]:
    """Up to ``limit`` parked (id, score) entries due before ``before_ms``, oldest first."""
    got = await _each_bucket(
        redis,
        await buckets(redis, k, before_ms),
        lambda pipe, key: pipe.zrange(
            key, "-inf", f"({before_ms}", byscore=True, offset=0, num=limit, withscores=True
        ),
    )
    found = sorted((float(s), str(m)) for some in got if isinstance(some, list) for m, s in some)
    return [(sid, s) for s, sid in found[:limit]]


async def _each_bucket(
    redis: Redis, keys: list[str], read: Callable[[Pipeline, str], object]
) -> list[Any]:
    """The replies of ``read``'s commands for each bucket key, READ_BUCKETS to a pipeline
    (errors in place: a key of another type is not rsched's)."""
    out: list[Any] = []
    for start in range(0, len(keys), READ_BUCKETS):
        async with redis.pipeline(transaction=False) as pipe:
            for key in keys[start : start + READ_BUCKETS]:
                read(pipe, key)
            out += await pipe.execute(raise_on_error=False)
    return out


async def bucket_ids(redis: Redis, k: Keys, first: int, want: int) -> tuple[list[str], int]:
    """The ids of whole parked buckets, in bucket number order from ``first``, until there are
    ``want`` or more, and the number to go on from (0 once the last bucket was read): the
    retention sweep walks them a slice at a time."""
    numbers = sorted(int(str(n)) for n in await redis.zrange(k.parked, 0, -1) if str(n).isdigit())
    numbers = [n for n in numbers if n >= first]
    ids: list[str] = []
    for start in range(0, len(numbers), READ_PIPELINE):
        chosen = numbers[start : start + READ_PIPELINE]
        async with redis.pipeline(transaction=False) as pipe:
            for n in chosen:
                pipe.zrange(k.parked_at(n), 0, -1)
            got = await pipe.execute(raise_on_error=False)
        for n, some in zip(chosen, got, strict=True):
            if isinstance(some, list):
                ids += (str(sid) for sid in some)
            if len(ids) >= want:
                return ids, n + 1
    return ids, 0


def earliest(a: tuple[str, float] | None, b: tuple[str, float] | None) -> tuple[str, float] | None:
    """The earlier of two (id, score) entries in index order (score, then id)."""
    if a is None or b is None:
        return a or b
    return min(a, b, key=lambda e: (e[1], e[0]))


def score_arg(score: float) -> str:
    """A score as a script argument: whole ms, or +inf."""
    return "+inf" if math.isinf(score) and score > 0 else str(int(score))
