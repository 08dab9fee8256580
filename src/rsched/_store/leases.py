"""Redis access for who leads: each partition's lease, and the live schedulers that share them.

A partition's lease (``{p}:leader``, fenced by ``{p}:fence``) is held by one scheduler at a time;
every fire and release checks it in the script. The schedulers beat into the deployment's
``{prefix}:schedulers`` so that each knows the others (rsched._scheduler.membership).
docs/keys.md documents the keys.
"""

from __future__ import annotations

from redis.asyncio import Redis

from rsched._core.codes import Code, check
from rsched._core.keys import Keys
from rsched._redis import scripts


class LeaseStore(scripts.ScriptCaller):
    """The lease scripts of one partition, and the schedulers' membership list."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        super().__init__(redis)
        self.keys = keys
        self.holder: str | None = None  # the lease value a refused acquire saw

    async def acquire(self, owner: str, ttl_ms: int) -> tuple[str | None, int]:
        """(lease value "<token>:<owner>" when acquired else None, ms until the holder's expiry);
        a refused call leaves the holder's lease value in ``holder``."""
        k = self.keys
        res = await self.call("lease_acquire", [k.leader, k.fence, k.leader_ttl], [owner, ttl_ms])
        if check(res, script="lease_acquire") == Code.OK:
            return f"{res[1]}:{owner}", ttl_ms
        self.holder = str(res[1])
        return None, int(res[2])

    async def renew(self, lease: str, ttl_ms: int) -> bool:
        """True when renewed; False when the caller no longer holds the lease."""
        res = await self.call(
            "lease_renew", [self.keys.leader, self.keys.leader_ttl], [lease, ttl_ms]
        )
        return check(res, script="lease_renew") == Code.OK

    async def release(self, lease: str) -> bool:
        """True when released; False when the caller did not hold the lease."""
        res = await self.call("lease_release", [self.keys.leader], [lease])
        return check(res, script="lease_release") == Code.OK

    async def beat(self, scheduler_id: str, window_ms: int) -> tuple[str, ...]:
        """Record that ``scheduler_id`` is alive (lua/scheduler_beat.lua); returns the ids of the
        live schedulers (beat within ``window_ms``), sorted."""
        res = await self.call("scheduler_beat", [self.keys.schedulers], [scheduler_id, window_ms])
        return tuple(sorted(str(x) for x in res[1:]))

    async def members(self) -> list[tuple[str, int]]:
        """Every scheduler on the membership list with its last beat (ms, Redis time), the
        newest first: live ones and those whose beats stopped (the next beat of a live one
        drops them after its window)."""
        # ZRANGE (every role may read): the list holds a few schedulers.
        found = await self.redis.zrange(self.keys.schedulers, 0, -1, withscores=True)
        return [(str(pair[0]), int(pair[1])) for pair in reversed(found)]

    async def leave(self, scheduler_id: str) -> None:
        """Take ``scheduler_id`` off the live list at once (a clean stop)."""
        await self.redis.zrem(self.keys.schedulers, scheduler_id)
