"""Each queue's depth over the last hour: sampled once a minute by the partition's leader
(``{p}:depth``, docs/keys.md), read per queue by the SDK.

A sample is one pipeline of XLEN and ZCARD per queue and one HSET of every queue's field, so a
minute costs the leader one round trip whatever it fires. Each queue has 64 fields at most (the
slot ``minute mod 64`` is overwritten a little over an hour later): the hash stays bounded
without an EXPIRE or a sweep.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rsched._core.keys import Keys
from rsched._core.rules import PRIORITIES

#: Slots per queue: more than the hour a read asks for.
SLOTS = 64


def _field(queue: str, minute: int) -> str:
    return f"{queue}:{minute % SLOTS}"


async def sample_depth(redis: Redis, keys: Keys, now_ms: int) -> int:
    """Record every queue's waiting and delayed jobs for the minute of ``now_ms`` (Redis time);
    returns how many queues. A queue's waiting jobs count every priority level."""
    names = sorted(str(q) for q in await redis.smembers(keys.queues))
    if not names:
        return 0
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            for level in PRIORITIES:
                pipe.xlen(keys.queue(name, level))
            pipe.zcard(keys.delayed_queue(name))
        counts = await pipe.execute(raise_on_error=False)
    minute = now_ms // 60_000
    per = len(PRIORITIES) + 1
    fields: dict[str, str] = {}
    for i, name in enumerate(names):
        got = [c if isinstance(c, int) else 0 for c in counts[i * per : (i + 1) * per]]
        fields[_field(name, minute)] = f"{minute} {sum(got[:-1])} {got[-1]}"
    await redis.hset(keys.depth, mapping=fields)  # type: ignore[arg-type]
    return len(names)


async def read_depth(redis: Redis, keys: Keys, queue: str) -> dict[int, tuple[int, int]]:
    """The samples of ``queue`` in this partition: epoch minute -> (waiting, delayed). Fields
    written by someone else (not three numbers) are left out; a key of another type reads as
    none."""
    try:
        values = await redis.hmget(keys.depth, [f"{queue}:{slot}" for slot in range(SLOTS)])
    except ResponseError as exc:
        if "WRONGTYPE" in str(exc):
            return {}
        raise
    out: dict[int, tuple[int, int]] = {}
    for value in values:
        parts = str(value).split() if value is not None else []
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            out[int(parts[0])] = (int(parts[1]), int(parts[2]))
    return out
